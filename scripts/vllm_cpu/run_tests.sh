#!/usr/bin/env bash
# The opt-in real-vLLM suite: sets up if needed, then runs tests/real_vllm against two real vLLM CPU
# replicas (started and stopped by the tests; ~3 GiB RSS and one core each; a few minutes).
#   scripts/vllm_cpu/run_tests.sh [pytest args]
# The gateway's side runs with $PYTHON, default the checkout's .venv (no venv needs activating).
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
REPO="$(cd "$HERE/../.." && pwd)"
if [ -z "${PYTHON:-}" ]; then
  if [ -x "$REPO/.venv/bin/python" ]; then PYTHON="$REPO/.venv/bin/python"; else PYTHON=python3; fi
fi
export PYTHON
"$HERE/setup.sh"
cd "$REPO"
# -n 0: one pytest process. The replicas are a session fixture, and pyproject's `-n 4` would start a
# session (two replicas, ~3 GiB each) per xdist worker: eight replicas, more memory than the machine has.
exec "$PYTHON" -m pytest -m real_vllm tests/real_vllm -n 0 -q -p no:cacheprovider "$@"
