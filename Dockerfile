# syntax=docker/dockerfile:1
# Build:  docker build -t groupwarden:dev .        (docs/deploy.md)
# Stage 1 builds groupwarden's wheel and a virtualenv of wheels only (pinned by
# deploy/docker/constraints.txt); stage 2 carries just that venv: no compilers, no pip cache, no
# build tools. tests/integration/test_image_install.py runs the same install steps in a clean venv.
ARG PYTHON_IMAGE=python:3.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PYTHONDONTWRITEBYTECODE=1
WORKDIR /src
COPY pyproject.toml README.md ./
COPY operator ./operator
COPY deploy/docker/constraints.txt /tmp/constraints.txt
# --only-binary: every dependency comes as a wheel, nothing is compiled.
RUN python -m pip wheel --no-deps --wheel-dir /tmp/wheels . \
 && python -m venv /opt/groupwarden \
 && /opt/groupwarden/bin/pip install --only-binary=:all: --constraint /tmp/constraints.txt /tmp/wheels/groupwarden-*.whl \
 && /opt/groupwarden/bin/pip uninstall --yes pip setuptools \
 && find /opt/groupwarden -name '__pycache__' -prune -exec rm -rf {} + \
 && /opt/groupwarden/bin/groupwarden --help >/dev/null

FROM ${PYTHON_IMAGE}
ARG VERSION=0.1.0
ARG REVISION=unknown
LABEL org.opencontainers.image.title="groupwarden" \
      org.opencontainers.image.description="Kubernetes operator that keeps Apache Kafka consumer groups tidy" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.source="https://github.com/groupwarden/groupwarden" \
      org.opencontainers.image.documentation="https://github.com/groupwarden/groupwarden/blob/main/docs/deploy.md" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}"
# The base image's own pip/setuptools are not needed at run time either.
RUN python -m pip uninstall --yes --no-cache-dir pip setuptools wheel 2>/dev/null || true \
 && rm -rf /root/.cache
COPY --from=build /opt/groupwarden /opt/groupwarden
ENV PATH=/opt/groupwarden/bin:$PATH PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
# Numeric user (runAsNonRoot can verify it); the Helm chart mounts an emptyDir on /tmp for PEM files.
USER 10001:10001
WORKDIR /tmp
EXPOSE 8080
ENTRYPOINT ["groupwarden"]
CMD ["run", "--all-namespaces"]
