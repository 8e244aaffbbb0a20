#!/usr/bin/env bash
# Create .venv and install fedapp with its test extra; idempotent, safe on a fresh machine.
# Once done, later calls return at once until pyproject.toml changes (a stamp in .venv).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
STAMP=.venv/fedapp-setup.stamp
want="$(pwd) $(sha256sum pyproject.toml | cut -d' ' -f1)"
[ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$want" ] && exit 0
[ -x .venv/bin/python ] || "$PY" -m venv .venv
. .venv/bin/activate
# pip warns about every configured package index that is absent on this machine; keep real errors
pipq() { python -m pip "$@" 2> >(grep -v "is ignored: it is neither a file nor a directory" >&2); }
pipq install -q --upgrade pip >/dev/null
# torch first and pinned: an unpinned torch would pull several GB of CUDA packages on a CPU machine.
python -c "import torch" 2>/dev/null || pipq install -q "torch==${TORCH_VERSION:-2.13.0}"
pipq install -q -e ".[dev]"
# nginx: the Fleet-API-only proxy of docs/deployment.md (scripts/fleet_proxy.py, tests/test_deployment_proxy.py).
# Installed where apt-get can (root on Debian); elsewhere that test is skipped. FEDAPP_NO_NGINX=1 skips this.
if [ -z "${FEDAPP_NO_NGINX:-}" ] && ! command -v nginx >/dev/null && [ ! -x /usr/sbin/nginx ] \
        && command -v apt-get >/dev/null && [ "$(id -u)" = 0 ]; then
    { DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends nginx >/dev/null 2>&1 \
        || { apt-get update -q >/dev/null 2>&1 \
             && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends nginx >/dev/null; }; } \
        || echo "setup: nginx not installed; tests/test_deployment_proxy.py will be skipped" >&2
    # Debian starts a default site on port 80 where systemd runs; fleet_proxy.py runs its own nginx
    if command -v systemctl >/dev/null; then systemctl disable --now nginx >/dev/null 2>&1 || true; fi
fi
echo "$want" > "$STAMP"
