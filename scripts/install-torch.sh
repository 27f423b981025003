#!/usr/bin/env bash
# Installs PyTorch's libtorch (the torch wheel with CUDA and its own NCCL) and the matching
# torchvision into the project-local virtual environment .venv, at the versions pinned in
# requirements/torch.txt. CMake finds Torch there (cmake/torch.cmake); the checkpoint tests use
# its torchvision.
#
# The wheels (several GB) are downloaded once into a wheel cache (DEEPOOL_WHEEL_CACHE, default
# ~/.cache/pip/deepool-wheels) and installed from there without the network afterwards.
# Idempotent: a .venv that already holds the pinned versions is left as it is.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
requirements="$root/requirements/torch.txt"
venv="${DEEPOOL_VENV:-$root/.venv}"
cache="${DEEPOOL_WHEEL_CACHE:-$HOME/.cache/pip/deepool-wheels}"
python="${DEEPOOL_BASE_PYTHON:-python3}"

# "torch==X" -> X, from the one place the versions are written.
pinned() { sed -n "s/^$1==\([^ ]*\).*/\1/p" "$requirements"; }
want_torch="$(pinned torch)"
want_vision="$(pinned torchvision)"
[[ -n "$want_torch" && -n "$want_vision" ]] || {
  echo "install-torch: $requirements must pin torch==X and torchvision==Y" >&2
  exit 1
}

installed() {
  [[ -x "$venv/bin/python" ]] || return 1
  "$venv/bin/python" - "$want_torch" "$want_vision" <<'PY' 2>/dev/null
import sys
from importlib.metadata import version
sys.exit(0 if (version("torch"), version("torchvision")) == tuple(sys.argv[1:3]) else 1)
PY
}

if installed; then
  echo "install-torch: torch $want_torch and torchvision $want_vision already in $venv"
  exit 0
fi

# The installed wheels take about 5 GB and pip unpacks them through a temporary directory:
# stop at once with the reason rather than minutes later with pip's ENOSPC.
need_gb=8
mkdir -p "$(dirname "$venv")"
free_gb=$(($(df -Pk "$(dirname "$venv")" | awk 'NR == 2 {print $4}') / 1024 / 1024))
if ((free_gb < need_gb)); then
  echo "install-torch: $free_gb GB free under $(dirname "$venv"); torch needs about $need_gb GB" \
    "(free some space, or set DEEPOOL_VENV to a larger filesystem)" >&2
  exit 1
fi

start=$SECONDS
if [[ ! -x "$venv/bin/python" ]]; then
  "$python" -m venv "$venv" || {
    echo "install-torch: '$python -m venv' failed (on Debian: apt-get install python3-venv)" >&2
    exit 1
  }
fi
mkdir -p "$cache"
echo "install-torch: fetching torch $want_torch and torchvision $want_vision into $cache" \
  "(several GB the first time)"
"$venv/bin/python" -m pip download --quiet --progress-bar off -d "$cache" -r "$requirements"
echo "install-torch: installing into $venv"
"$venv/bin/python" -m pip install --quiet --progress-bar off --no-index --find-links "$cache" \
  -r "$requirements"
installed || { echo "install-torch: $venv does not hold the pinned versions after install" >&2; exit 1; }
echo "install-torch: done in $((SECONDS - start)) s"
