# make test        — create .venv if missing, install the locked versions, lint, type-check, test.
# make demo        — create .venv if missing and run `ldpem demo`.
# make lock        — re-resolve requirements/*.lock from pyproject.toml (newest allowed versions).
# make test-latest — the suite against the newest versions pyproject.toml allows (.venv-latest),
#                    to see drift before `make lock`.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
# Exact versions with hashes: runtime + every extra the tests use (make test, make demo), and
# runtime + the data-source extras (the Docker image). Both are written by `make lock`.
TEST_LOCK    := requirements/test.lock
RUNTIME_LOCK := requirements/runtime.lock
LATEST := .venv-latest
TOOLS  := .venv-tools
UV_VERSION := 0.13.9
SOURCES := cli common server client tests benchmarks

.PHONY: test test-fast test-latest lint typecheck demo bench lock clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

# --no-deps: the lock is complete (pip check proves it); --require-hashes: nothing but the
# files that were locked. The project itself goes in editable, without build isolation, so
# its build backend is the locked setuptools too.
$(STAMP): $(TEST_LOCK) pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet --require-hashes --no-deps -r $(TEST_LOCK)
	$(BIN)/python -m pip install --quiet --no-deps --no-build-isolation -e .
	$(BIN)/python -m pip check
	touch $(STAMP)

lint: $(STAMP)
	$(BIN)/ruff check $(SOURCES)
	$(BIN)/ruff format --check $(SOURCES)

# mypy cannot follow setuptools' package-dir mapping, so it checks a tree of links that
# lays the folders out as the installed `ldpem` package. The tests are the package `tests`;
# the benchmarks are scripts (no package: each imports _fedkit from its own folder, and
# bench_sources the tests' PostgreSQL kit, hence the checkout on the path), so a second run.
TYPECHECK_TREE := $(VENV)/typecheck
typecheck: $(STAMP)
	rm -rf $(TYPECHECK_TREE) && mkdir -p $(TYPECHECK_TREE)/ldpem
	ln -s $(CURDIR)/cli/*.py $(CURDIR)/cli/py.typed $(CURDIR)/cli/commands $(TYPECHECK_TREE)/ldpem/
	ln -s $(CURDIR)/cli/run $(CURDIR)/cli/demo $(CURDIR)/cli/experiment $(TYPECHECK_TREE)/ldpem/
	ln -s $(CURDIR)/common $(CURDIR)/server $(CURDIR)/client $(TYPECHECK_TREE)/ldpem/
	MYPYPATH=$(TYPECHECK_TREE) $(BIN)/mypy -p ldpem -p tests
	MYPYPATH=$(TYPECHECK_TREE):$(CURDIR) $(BIN)/mypy benchmarks

test: lint typecheck
	$(BIN)/python -m pytest -q

test-fast: $(STAMP)
	$(BIN)/python -m pytest -q -m "not slow"

test-latest:
	rm -rf $(LATEST)
	$(PYTHON) -m venv $(LATEST)
	$(LATEST)/bin/python -m pip install --quiet --upgrade pip
	$(LATEST)/bin/python -m pip install --quiet --upgrade --upgrade-strategy eager -e '.[test]'
	$(LATEST)/bin/python -m pip list --format=freeze > $(LATEST)/versions.txt
	@echo "newest allowed versions: $(LATEST)/versions.txt"
	$(LATEST)/bin/python -m pytest -q

$(TOOLS)/bin/uv:
	$(PYTHON) -m venv $(TOOLS)
	$(TOOLS)/bin/python -m pip install --quiet 'uv==$(UV_VERSION)'

# One resolution (the test lock); the runtime lock is constrained to the same versions.
lock: | $(TOOLS)/bin/uv
	$(TOOLS)/bin/uv pip compile --quiet --generate-hashes --python-version 3.11 \
	  --extra test pyproject.toml requirements/build.in -o $(TEST_LOCK)
	$(TOOLS)/bin/uv pip compile --quiet --generate-hashes --python-version 3.11 \
	  --extra parquet --extra postgres --constraint $(TEST_LOCK) pyproject.toml requirements/build.in \
	  -o $(RUNTIME_LOCK)

demo: $(STAMP)
	$(BIN)/ldpem demo

bench: $(STAMP)
	$(BIN)/python benchmarks/bench_mechanism.py

clean:
	rm -rf $(VENV) $(LATEST) $(TOOLS) .pytest_cache .mypy_cache .ruff_cache build *.egg-info
