# The ldpem image: the coordinator, the hospital agent and the operator commands are all
# `ldpem ...` (ENTRYPOINT). docker-compose.yml runs one container per part.
#   docker build -t ldpem .                       (base: the official slim Python image)
#   docker build --build-arg BASE_IMAGE=... .     (any image with python3 >= 3.11 and venv)
#
# The base is pinned by digest (the multi-platform index of python:3.11-slim, Python 3.11.15
# on Debian trixie, as recorded by docker-library/repo-info), so every build starts from
# the same bytes; the tag is kept for the reader and ignored by Docker. To move to a newer
# base: `docker buildx imagetools inspect python:3.11-slim` prints the current digest.
ARG BASE_IMAGE=python:3.11-slim@sha256:90744cff8f32887f075c47d747a173ff333e9e98801667af93c357fa9f5e28ff

# --- deps: the exact versions and hashes of requirements/runtime.lock (with the Parquet
# and PostgreSQL readers and the build backend), in a venv. A layer of its own, before any
# code, so that a change of the code reuses it.
FROM ${BASE_IMAGE} AS deps
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PATH=/opt/ldpem/bin:$PATH
COPY requirements/runtime.lock /opt/ldpem-runtime.lock
RUN python3 -m venv /opt/ldpem \
 && pip install --require-hashes --no-deps --requirement /opt/ldpem-runtime.lock \
 && rm /opt/ldpem-runtime.lock

# --- build: a wheel of the project, from the package folders only, installed into a
# prefix laid out like the venv (lib/python3.X/site-packages, bin). Nothing of this stage
# but that prefix reaches the image: no checkout, no tests, no wheel.
FROM deps AS build
WORKDIR /src
COPY pyproject.toml README.md LICENSE ./
COPY cli/ cli/
COPY common/ common/
COPY server/ server/
COPY client/ client/
RUN pip wheel --no-deps --no-build-isolation --wheel-dir /wheels . \
 && pip install --no-deps --no-compile --prefix /install /wheels/ldpem-*.whl

# --- the image: the deps stage, plus the installed package.
FROM deps
COPY --from=build /install/ /opt/ldpem/
# An unprivileged user; /data (records) and /state (SQLite state and ledgers) belong to it,
# so named volumes mounted there start owned by it.
RUN ldpem --version \
 && useradd --create-home --uid 10001 --user-group ldpem \
 && mkdir -p /data /state \
 && chown ldpem:ldpem /data /state
USER ldpem
WORKDIR /home/ldpem
EXPOSE 8765
ENTRYPOINT ["ldpem"]
CMD ["--help"]
