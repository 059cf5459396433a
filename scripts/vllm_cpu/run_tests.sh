#!/usr/bin/env bash
# The opt-in real-vLLM suite: sets up if needed, then runs tests/real_vllm against two real vLLM CPU
# replicas (started and stopped by the tests; ~3 GiB RSS and one core each; a few minutes).
#   scripts/vllm_cpu/run_tests.sh [pytest args]
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
REPO="$(cd "$HERE/../.." && pwd)"
"$HERE/setup.sh"
cd "$REPO"
exec python -m pytest -m real_vllm tests/real_vllm -q -p no:cacheprovider "$@"
