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

# Dependencies first, from pyproject.toml alone, so that a change of the code reuses them.
WORKDIR /src
COPY pyproject.toml ./
RUN python3 -m venv /opt/ldpem \
 && python3 -c "import tomllib; print('\n'.join(tomllib.load(open('pyproject.toml', 'rb'))['project']['dependencies']))" > /tmp/requirements.txt \
 && pip install --requirement /tmp/requirements.txt \
 && rm /tmp/requirements.txt

COPY . .
RUN pip install --no-deps . \
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
