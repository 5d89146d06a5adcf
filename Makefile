# make test   — create .venv if missing, install ldpem with its test extras, lint, type-check, test.
# make demo   — create .venv if missing and run `ldpem demo`.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: test test-fast lint typecheck demo bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test]'
	touch $(STAMP)

lint: $(STAMP)
	$(BIN)/ruff check cli common server client tests benchmarks
	$(BIN)/ruff format --check cli common server client tests benchmarks

# mypy cannot follow setuptools' package-dir mapping, so it checks a tree of links that
# lays the folders out as the installed `ldpem` package.
TYPECHECK_TREE := $(VENV)/typecheck
typecheck: $(STAMP)
	rm -rf $(TYPECHECK_TREE) && mkdir -p $(TYPECHECK_TREE)/ldpem
	ln -s $(CURDIR)/cli/*.py $(TYPECHECK_TREE)/ldpem/
	ln -s $(CURDIR)/common $(CURDIR)/server $(CURDIR)/client $(TYPECHECK_TREE)/ldpem/
	MYPYPATH=$(TYPECHECK_TREE) $(BIN)/mypy -p ldpem

test: lint typecheck
	$(BIN)/python -m pytest -q

test-fast: $(STAMP)
	$(BIN)/python -m pytest -q -m "not slow"

demo: $(STAMP)
	$(BIN)/ldpem demo

bench: $(STAMP)
	$(BIN)/python benchmarks/bench_mechanism.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache build *.egg-info
