#!/usr/bin/env bash
# Syntax/semantic check of the CUDA and NCCL code paths on a machine without a GPU.
#
# Usage: scripts/check-cuda-compile.sh [BUILD_DIR [FILE]]   (BUILD_DIR default: build; FILE: only that one)
#
# What it checks: every source and header under worker/runtime that contains
# DEEPOOL_HAVE_CUDA is compiled with -fsyntax-only and
#   -DDEEPOOL_HAVE_CUDA=1 -DUSE_C10D_NCCL -DUSE_C10D_GLOO
# using the compile flags of a configured (CPU) build, taken from BUILD_DIR/compile_commands.json
# (the file's own entry, or worker/runtime/device.cc's for headers), plus the CUDA toolkit's
# include directory (CUDA_HOME, default /usr/local/cuda), which must hold cuda_runtime.h and nccl.h.
# This needs libtorch headers that include c10/cuda, ATen/cuda and ProcessGroupNCCL.hpp (Debian's
# CPU-only libtorch-dev ships them; C10_CUDA_NO_CMAKE_CONFIGURE_FILE stands in for the
# cuda_cmake_macros.h that only a CUDA build of libtorch generates).
#
# Limits: nothing is linked or run. It proves that the guarded code parses and type-checks against
# these headers (names, signatures, includes), not that it works, and not that it builds against
# another libtorch version than the one whose headers are found (code under TORCH_VERSION_MAJOR
# branches for other versions is skipped by the preprocessor). It is not part of CTest or CI.
# Exits non-zero if any file fails to compile.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${1:-build}"
[[ "$build" = /* ]] || build="$root/$build"
db="$build/compile_commands.json"
cuda="${CUDA_HOME:-/usr/local/cuda}"

[[ -f "$db" ]] || { echo "no $db: configure a build first (cmake -S . -B $build ...)" >&2; exit 2; }
[[ -f "$cuda/include/cuda_runtime.h" ]] || { echo "no $cuda/include/cuda_runtime.h (set CUDA_HOME)" >&2; exit 2; }
nccl_inc=""
if [[ ! -f "$cuda/include/nccl.h" ]]; then
  nccl_h="$(find "$cuda" /usr/include -name nccl.h -print -quit 2>/dev/null || true)"
  [[ -n "$nccl_h" ]] || { echo "no nccl.h under $cuda or /usr/include" >&2; exit 2; }
  nccl_inc="$(dirname "$nccl_h")"
fi

only="${2:-}"  # optional: check only this file (path relative to the checkout)
mapfile -t files < <(cd "$root" && grep -l DEEPOOL_HAVE_CUDA worker/runtime/*.cc worker/runtime/*.h | sort)
if [[ -n "$only" ]]; then files=("$only"); fi
failed=0
for f in "${files[@]}"; do
  # The compiler and flags of the file's entry (or device.cc's), without output, input, PCH and -O.
  cmd="$(python3 - "$db" "$root/$f" "$root/worker/runtime/device.cc" <<'PY'
import json, shlex, sys, os
db, want, fallback = sys.argv[1:4]
entries = json.load(open(db))
def find(path):
    for e in entries:
        if os.path.realpath(os.path.join(e["directory"], e["file"])) == os.path.realpath(path):
            return e
    return None
e = find(want) or find(fallback)
if e is None:
    sys.exit("no compile_commands entry for %s or %s" % (want, fallback))
args = e.get("arguments") or shlex.split(e["command"])
out, skip = [], False
for i, a in enumerate(args):
    if skip:
        skip = False
        continue
    if a in ("-o", "-c", "-include", "-MF", "-MT", "-MQ"):
        skip = True
        continue
    if a.startswith(("-O", "-Winvalid-pch", "-MD", "-MMD")) or i == len(args) - 1 and a == e["file"]:
        continue
    out.append(a)
print(shlex.join(out))
PY
)"
  # C10_CUDA_NO_CMAKE_CONFIGURE_FILE: a CPU-only libtorch lacks the generated cuda_cmake_macros.h.
  extra=(-fsyntax-only -std=c++17 -DDEEPOOL_HAVE_CUDA=1 -DUSE_C10D_NCCL -DUSE_C10D_GLOO
         -DC10_CUDA_NO_CMAKE_CONFIGURE_FILE -I"$root"
         -I"$cuda/include")
  if [[ -n "$nccl_inc" ]]; then extra+=(-I"$nccl_inc"); fi
  echo "== $f"
  # A header is checked through a one-line translation unit that includes it.
  if [[ "$f" == *.h ]]; then src=(-x c++ -); else src=(-x c++ "$root/$f"); fi
  if ! (cd "$build" && printf '#include "%s"\n' "$f" | eval "$cmd" '"${extra[@]}"' '"${src[@]}"'); then
    failed=$((failed + 1))
  fi
done
echo "checked ${#files[@]} files, $failed failed"
[[ $failed -eq 0 ]]
