# The ldpem image: the coordinator, the hospital agent and the operator commands are all
# `ldpem ...` (ENTRYPOINT). docker-compose.yml runs one container per part.
#   docker build -t ldpem .                       (base: the official slim Python image)
#   docker build --build-arg BASE_IMAGE=... .     (any image with python3 >= 3.11 and venv)
ARG BASE_IMAGE=python:3.11-slim
FROM ${BASE_IMAGE}

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PATH=/opt/ldpem/bin:$PATH

# Dependencies first (with the Parquet and PostgreSQL readers): the exact versions and hashes
# of requirements/runtime.lock, so that a change of the code reuses them and every image has
# what CI tested.
WORKDIR /src
COPY requirements/runtime.lock ./
RUN python3 -m venv /opt/ldpem \
 && pip install --require-hashes --no-deps --requirement runtime.lock

COPY . .
RUN pip install --no-deps --no-build-isolation . \
 && cd / && rm -rf /src \
 && ldpem --version

# An unprivileged user; /data (records) and /state (SQLite state and ledgers) belong to it,
# so named volumes mounted there start owned by it.
RUN useradd --create-home --uid 10001 --user-group ldpem \
 && mkdir -p /data /state \
 && chown ldpem:ldpem /data /state
USER ldpem
WORKDIR /home/ldpem
EXPOSE 8765
ENTRYPOINT ["ldpem"]
CMD ["--help"]
