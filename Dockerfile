# syntax=docker/dockerfile:1
# The ETT telemetry service: `ett serve`, `ett aggregate`, `ett migrate`, `ett demo`.
# Two stages: the build stage has pip and setuptools; the runtime stage only the venv and
# the source tree, running as an unprivileged user. See docs/deploy.md.
ARG PYTHON_IMAGE=python:3.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1
RUN python -m venv /opt/ett
WORKDIR /app
# Dependencies first, from pyproject.toml alone (placeholder packages), so this layer is
# reused until the dependency list changes rather than on every source edit.
COPY pyproject.toml README.md ./
RUN mkdir service ett_core \
 && touch service/__init__.py ett_core/__init__.py \
 && /opt/ett/bin/pip install . \
 && /opt/ett/bin/pip uninstall -y ett-telemetry \
 && rm -rf service ett_core build *.egg-info
COPY alembic.ini ./
COPY migrations ./migrations
COPY ett_core ./ett_core
COPY service ./service
COPY deploy/taxonomy.yaml ./deploy/taxonomy.yaml
# The console's team pages read the SLO file (ETT_SLO_FILE) for their burn table.
COPY deploy/slo.yaml ./deploy/slo.yaml
# Editable on purpose: the service finds migrations/ beside service/, as in a checkout,
# and /app is copied to the same path below so the install stays valid.
RUN /opt/ett/bin/pip install --no-deps -e . \
 && /opt/ett/bin/python -m compileall -q service ett_core migrations

FROM ${PYTHON_IMAGE}
ENV PATH=/opt/ett/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    ETT_DATA_DIR=/tmp/ett-data
RUN groupadd --system --gid 10001 ett \
 && useradd --system --uid 10001 --gid ett --no-create-home --home-dir /nonexistent \
      --shell /usr/sbin/nologin ett
COPY --from=build /opt/ett /opt/ett
COPY --from=build /app /app
WORKDIR /app
# Numeric, so Kubernetes' runAsNonRoot can verify it without reading /etc/passwd.
USER 10001:10001
EXPOSE 8080 9464
ENTRYPOINT ["ett"]
CMD ["serve", "--host", "0.0.0.0", "--port", "8080"]
