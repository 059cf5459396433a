#!/usr/bin/env bash
# Build the image the chart deploys from the repository's Dockerfile, with podman and without pulling
# a base image, then smoke-test it without a container runtime. Opt-in (docs/deploy.md, "Building
# the image without a registry"): needs root, podman, debootstrap, a Debian mirror and PyPI.
#
#   sudo scripts/build_image.sh                 # build localhost/prefix-gateway:dev and check it
#   IMAGE=registry.example.com/pgw:0.1.0 sudo scripts/build_image.sh
#
# 1. The base: a debootstrap of Debian bookworm (python3, python3-venv), imported with `podman import`
#    and passed as PYTHON_IMAGE; the builder stage gets the same base plus python3-pip (BUILDER_IMAGE),
#    so the final stage carries no pip. Cached under $WORK between runs.
# 2. `podman build --isolation chroot` of the real Dockerfile (storage driver vfs: works where overlay
#    mounts and cgroups are not available, e.g. inside a container; `podman run` is not needed).
# 3. The smoke test, in a chroot of `podman image mount` (read-only, as the chart's
#    readOnlyRootFilesystem; /tmp, the ledger directory and the policy bind-mounted as the pod's
#    volumes): no compiler and no pip in the final stage; the gateway starts as uid 10001 from the
#    chart's rendered policy, answers /health and /ready, and exits 0 on SIGTERM.
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
WORK="${WORK:-/var/tmp/pgw-image}"
MIRROR="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"
IMAGE="${IMAGE:-localhost/prefix-gateway:dev}"
PY="${PYTHON:-$ROOT/.venv/bin/python}"  # renders the chart (helm-python-sdk, the dev extra)
HOST_CA="${HOST_CA:-/etc/ssl/certs/ca-certificates.crt}"
BASE=localhost/pgw-python:bookworm
BUILDER=localhost/pgw-python-pip:bookworm
PODMAN=(podman --storage-driver vfs)

say() { printf '\n== %s\n' "$*"; }
die() { printf 'build_image: %s\n' "$*" >&2; exit 1; }

[ "$(id -u)" = 0 ] || die "run as root (podman with the vfs driver, chroot)"
for tool in podman debootstrap chroot mount; do
  command -v "$tool" >/dev/null || die "$tool not found (apt-get install -y podman debootstrap)"
done
[ -x "$PY" ] || die "no Python with the dev extra at $PY (python3 -m venv .venv && .venv/bin/pip install -e '.[dev]'), or set PYTHON"
mkdir -p "$WORK"

if ! "${PODMAN[@]}" image exists "$BASE"; then
  say "base image: debootstrap bookworm (python3, python3-venv) from $MIRROR"
  rm -rf "$WORK/rootfs"
  debootstrap --variant=minbase --include=python3,python3-venv,python-is-python3 \
    bookworm "$WORK/rootfs" "$MIRROR"
  rm -rf "$WORK/rootfs/var/cache/apt/archives/"*.deb "$WORK/rootfs/var/lib/apt/lists/"*
  tar -C "$WORK/rootfs" -c . | "${PODMAN[@]}" import - "$BASE"
  rm -rf "$WORK/rootfs"
fi
if ! "${PODMAN[@]}" image exists "$BUILDER"; then
  # The builder also trusts this machine's CA bundle (HOST_CA), so pip works behind a TLS-intercepting
  # proxy; only the builder stage has it, the final stage keeps Debian's own bundle.
  say "builder base: $BASE + python3-pip (+ the CAs of $HOST_CA)"
  ctx="$(mktemp -d "$WORK/builder.XXXXXX")"
  cp "$HOST_CA" "$ctx/host-ca.crt"
  printf '%s\n' "FROM $BASE" \
    "RUN apt-get update && apt-get install -y --no-install-recommends python3-pip ca-certificates && rm -rf /var/lib/apt/lists/*" \
    "COPY host-ca.crt /etc/ssl/certs/ca-certificates.crt" >"$ctx/Containerfile"
  "${PODMAN[@]}" build --isolation chroot -t "$BUILDER" -f "$ctx/Containerfile" "$ctx"
  rm -rf "$ctx"
fi

say "podman build of $ROOT/Dockerfile -> $IMAGE"
# --format docker keeps the Dockerfile's HEALTHCHECK (OCI images have no such field).
"${PODMAN[@]}" build --isolation chroot --format docker \
  --build-arg PYTHON_IMAGE="$BASE" --build-arg BUILDER_IMAGE="$BUILDER" \
  -t "$IMAGE" -f "$ROOT/Dockerfile" "$ROOT"

say "smoke test in a chroot of the image"
PORT="$("$PY" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
MPORT="$("$PY" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
CASE="$(mktemp -d "$WORK/smoke.XXXXXX")"
MNT="$("${PODMAN[@]}" image mount "$IMAGE")"
JAIL="$CASE/root"
GATEWAY_PID=""
cleanup() {
  [ -n "$GATEWAY_PID" ] && kill "$GATEWAY_PID" 2>/dev/null || true
  for m in "$JAIL/etc/prefix-gateway" "$JAIL/var/lib/prefix-gateway" "$JAIL/tmp" "$JAIL/proc" "$JAIL/dev" "$JAIL"; do
    mountpoint -q "$m" && umount -l "$m"
  done
  "${PODMAN[@]}" image unmount "$IMAGE" >/dev/null || true
  rm -rf "$CASE"
}
trap cleanup EXIT

# The final stage: no compiler, no pip, no package installer of Python.
for bad in usr/bin/gcc usr/bin/cc usr/bin/x86_64-linux-gnu-gcc-12 usr/bin/pip usr/bin/pip3 opt/venv/bin/pip; do
  [ ! -e "$MNT/$bad" ] || die "the final stage carries /$bad"
done
if find "$MNT/usr/lib/python3" "$MNT/opt/venv/lib" -maxdepth 3 -type d -name pip 2>/dev/null | grep -q .; then
  die "the final stage carries the pip module"
fi
echo "no compiler, no pip: OK"

# The chart's rendered policy (default values), on free ports.
"$PY" "$ROOT/scripts/chart_check.py" --out "$CASE/chart" \
  --set "policy.server.port=$PORT" --set "policy.server.metrics_port=$MPORT" >/dev/null
mkdir -p "$CASE/etc" "$CASE/ledger" "$CASE/tmp"
"$PY" - "$CASE/chart/prefix-gateway/templates/configmap.yaml" "$CASE/etc/policy.yaml" <<'EOF'
import sys, yaml
doc = yaml.safe_load(open(sys.argv[1]))
open(sys.argv[2], "w").write(doc["data"]["policy.yaml"])
EOF
chown -R 10001:10001 "$CASE/ledger"
chmod 1777 "$CASE/tmp"

mkdir -p "$JAIL"
mount --bind "$MNT" "$JAIL"
mount -o remount,bind,ro "$JAIL"
mount --bind "$CASE/etc" "$JAIL/etc/prefix-gateway"
mount --bind "$CASE/ledger" "$JAIL/var/lib/prefix-gateway"
mount --bind "$CASE/tmp" "$JAIL/tmp"
mount -t proc proc "$JAIL/proc"
mount --rbind /dev "$JAIL/dev"

env -i PATH=/opt/venv/bin:/usr/bin:/bin HOME=/nonexistent TMPDIR=/tmp PYTHONUNBUFFERED=1 \
  PREFIX_GATEWAY_SECRET=smoke-secret PREFIX_GATEWAY_ADMIN_TOKEN=smoke-admin \
  "$(command -v chroot)" --userspec=10001:10001 "$JAIL" /opt/venv/bin/prefix-gateway serve \
  --config /etc/prefix-gateway/policy.yaml >"$CASE/gateway.log" 2>&1 &
GATEWAY_PID=$!

"$PY" - "$PORT" "$MPORT" "$GATEWAY_PID" <<'EOF' || { cat "$CASE/gateway.log" >&2; die "smoke test failed"; }
import json, os, sys, time, urllib.request, urllib.error
port, mport, pid = sys.argv[1], sys.argv[2], int(sys.argv[3])
def get(url):
    try:
        with urllib.request.urlopen(url, timeout=2) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()
deadline = time.monotonic() + 60
while True:
    try:
        status, body = get(f"http://127.0.0.1:{port}/health")
        break
    except OSError:
        if time.monotonic() > deadline or not os.path.exists(f"/proc/{pid}"):
            sys.exit("the gateway did not answer /health")
        time.sleep(0.2)
assert status == 200 and json.loads(body) == {"status": "ok"}, (status, body)
ready, body = get(f"http://127.0.0.1:{port}/ready")  # the chart's example replica is not there: 503
assert json.loads(body) == {"ready": ready == 200}, (ready, body)
status, body = get(f"http://127.0.0.1:{mport}/metrics")
assert status == 200 and b"prefix_gateway_" in body, status
print(f"/health 200, /ready {ready} {{\"ready\": ...}} and nothing more, /metrics on its own port: OK")
EOF
uid="$(awk '/^Uid:/ {print $2}' "/proc/$GATEWAY_PID/status" 2>/dev/null || true)"
kill -TERM "$GATEWAY_PID"
rc=0; wait "$GATEWAY_PID" || rc=$?
GATEWAY_PID=""
[ "$rc" = 0 ] || { cat "$CASE/gateway.log" >&2; die "the gateway exited $rc on SIGTERM"; }
[ "$uid" = 10001 ] || die "the gateway ran as uid '$uid', not 10001"
echo "ran as uid 10001, exited 0 on SIGTERM: OK"
say "image $IMAGE built and checked"
