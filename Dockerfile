# syntax=docker/dockerfile:1
# Build: docker build -t groupwarden:dev .
# Stage 1 builds a wheel-only virtualenv; stage 2 carries just that venv (no compilers, no caches).
FROM python:3.11-slim-bookworm AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
COPY pyproject.toml README.md ./
COPY operator ./operator
RUN python -m venv /opt/groupwarden \
 && /opt/groupwarden/bin/pip install --no-compile . \
 && find /opt/groupwarden -name '__pycache__' -prune -exec rm -rf {} +

FROM python:3.11-slim-bookworm
LABEL org.opencontainers.image.title="groupwarden" \
      org.opencontainers.image.description="Kubernetes operator that keeps Kafka consumer groups tidy" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.source="https://github.com/groupwarden/groupwarden"
COPY --from=build /opt/groupwarden /opt/groupwarden
ENV PATH=/opt/groupwarden/bin:$PATH PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
USER 10001:10001
ENTRYPOINT ["groupwarden"]
CMD ["run", "--all-namespaces"]
