# syntax=docker/dockerfile:1
# Build:  docker build -t groupwarden:dev .        (docs/deploy.md)
# Stage 1 builds groupwarden's wheel and a virtualenv of wheels only (pinned by
# deploy/docker/constraints.txt); stage 2 carries just that venv: no compilers, no pip, no pip
# cache, no build tools. tests/integration/test_image_install.py runs the same install steps in a
# clean venv; tests/e2e/test_node_image.py checks the built image.
# Offline builds (no package index reachable from the build, e.g. `make image` on the devstack):
# put every wheel in .wheelhouse/ of the build context and pass --build-arg PIP_OFFLINE=1; pip then
# installs only from there (docs/deploy.md, "Building without index access").
ARG PYTHON_IMAGE=python:3.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
ARG PIP_OFFLINE=""
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PYTHONDONTWRITEBYTECODE=1
WORKDIR /src
COPY pyproject.toml README.md ./
COPY operator ./operator
# .wheelhous[e] matches nothing in a normal build context (only the constraints are copied).
COPY deploy/docker/constraints.txt .wheelhous[e] /tmp/build-inputs/
# --only-binary: every dependency comes as a wheel, nothing is compiled. The venv's own pip (from
# ensurepip) does the work, so a base image without pip (e.g. Debian's python3) builds too.
RUN if [ -n "$PIP_OFFLINE" ]; then export PIP_NO_INDEX=1 PIP_FIND_LINKS=/tmp/build-inputs; fi \
 && python -m venv /opt/groupwarden \
 && /opt/groupwarden/bin/pip wheel --no-deps --wheel-dir /tmp/wheels . \
 && /opt/groupwarden/bin/pip install --only-binary=:all: --constraint /tmp/build-inputs/constraints.txt /tmp/wheels/groupwarden-*.whl \
 && /opt/groupwarden/bin/pip uninstall --yes pip setuptools \
 && find /opt/groupwarden -name '__pycache__' -prune -exec rm -rf {} + \
 && /opt/groupwarden/bin/groupwarden --help >/dev/null

FROM ${PYTHON_IMAGE}
# Passed by `make image` and `make release` (the package's __version__ and the git commit); a plain
# `docker build` labels the image "unknown" rather than a version it may not be.
ARG VERSION=unknown
ARG REVISION=unknown
LABEL org.opencontainers.image.title="groupwarden" \
      org.opencontainers.image.description="Kubernetes operator that keeps Apache Kafka consumer groups tidy" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.source="https://github.com/groupwarden/groupwarden" \
      org.opencontainers.image.documentation="https://github.com/groupwarden/groupwarden/blob/main/docs/deploy.md" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}"
# The base image's own pip/setuptools are not needed at run time either, nor the pip wheels that
# ensurepip/venv keep to install pip later.
RUN python -m pip uninstall --yes --no-cache-dir pip setuptools wheel 2>/dev/null || true \
 && rm -rf /root/.cache /usr/share/python-wheels /usr/local/lib/python3*/ensurepip/_bundled \
      /usr/lib/python3*/ensurepip/_bundled
COPY --from=build /opt/groupwarden /opt/groupwarden
# A passwd/group entry for the numeric user: without one, getpwuid(10001) fails and so does every
# library that looks up the home directory (found when the chart's pod first ran on a real node).
RUN echo 'groupwarden:x:10001:10001:groupwarden:/tmp:/usr/sbin/nologin' >> /etc/passwd \
 && echo 'groupwarden:x:10001:' >> /etc/group
ENV PATH=/opt/groupwarden/bin:$PATH PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 HOME=/tmp
# Numeric user (runAsNonRoot can verify it); the Helm chart mounts an emptyDir on /tmp for PEM files.
USER 10001:10001
WORKDIR /tmp
EXPOSE 8080
ENTRYPOINT ["groupwarden"]
CMD ["run", "--all-namespaces"]
