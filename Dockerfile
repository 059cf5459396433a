# syntax=docker/dockerfile:1
# prefix-gateway image: a venv built in a throw-away stage, copied onto a clean slim Python.
#   docker build -t prefix-gateway:0.1.0 .
#   docker run --rm -p 8080:8080 -v $PWD/policy.yaml:/etc/prefix-gateway/policy.yaml:ro prefix-gateway:0.1.0
# The policy must listen on 0.0.0.0 (server.host) inside a container.
# Pin the base by digest in your registry mirror for reproducible builds (PYTHON_IMAGE=python:3.11-slim@sha256:...).
ARG PYTHON_IMAGE=python:3.11-slim-bookworm
# The builder stage needs pip; the final stage does not (python:*-slim has it, a bare Debian base does
# not: scripts/build_image.sh passes one with python3-pip here and one without as PYTHON_IMAGE).
ARG BUILDER_IMAGE=${PYTHON_IMAGE}

FROM ${BUILDER_IMAGE} AS builder
# Optional extras of the package: hf (tokenizers, for `tokenizer.kind: hf`), batch (the openai client,
# for `prefix-gateway batch`), otel (OpenTelemetry export, for `tracing.enabled`):
# --build-arg EXTRAS=hf,otel. (uvloop is a dependency.)
ARG EXTRAS=
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_ROOT_USER_ACTION=ignore
# A venv without pip of its own: the builder's pip installs into it, so the image carries no installer.
RUN python -m venv --without-pip /opt/venv
WORKDIR /src
COPY pyproject.toml README.m[d] ./
COPY gateway ./gateway
COPY router ./router
COPY cache ./cache
COPY config ./config
COPY sim ./sim
RUN pip --python /opt/venv/bin/python install --no-compile ".${EXTRAS:+[$EXTRAS]}" \
    && /opt/venv/bin/python -m compileall -q /opt/venv/lib \
    && /opt/venv/bin/prefix-gateway --help > /dev/null

FROM ${PYTHON_IMAGE} AS runtime
LABEL org.opencontainers.image.title="prefix-gateway" \
      org.opencontainers.image.description="OpenAI-compatible gateway for self-hosted LLM fleets" \
      org.opencontainers.image.licenses="Apache-2.0"
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1
RUN groupadd --system --gid 10001 gateway \
    && useradd --system --uid 10001 --gid 10001 --no-create-home --home-dir /nonexistent \
       --shell /usr/sbin/nologin gateway \
    && install -d -m 0755 /etc/prefix-gateway \
    && install -d -m 0750 -o 10001 -g 10001 /var/lib/prefix-gateway
COPY --from=builder /opt/venv /opt/venv
USER 10001:10001
WORKDIR /var/lib/prefix-gateway
EXPOSE 8080
STOPSIGNAL SIGTERM
# For plain Docker; Kubernetes uses the chart's probes (/health, /ready) instead.
HEALTHCHECK --interval=10s --timeout=3s --start-period=15s --retries=3 \
    CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8080/health', timeout=2)"]
ENTRYPOINT ["prefix-gateway"]
CMD ["serve", "--config", "/etc/prefix-gateway/policy.yaml"]
