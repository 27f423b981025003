#!/usr/bin/env bash
# The first thing to run on a GPU node: builds what the node needs, runs every GPU test (CTest
# label "gpu") and the FG-slowdown benchmark (deepool vs naive collocation on one GPU), and
# writes what it saw to docs/results/gpu-node.md (the file docs/benchmarks.md points to), so the
# numbers can be committed as they are.
#
# Usage: scripts/gpu-node-test.sh [--no-install] [--no-build] [--build-dir DIR] [--quick]
#   --no-install   skip scripts/install-deps.sh (a node without network, dependencies present)
#   --no-build     use an existing build (e.g. one copied from a build machine)
#   --quick        a shorter benchmark (fewer iterations and rounds)
# Exits non-zero when there is no usable GPU, when a GPU test fails or the benchmark fails.
# DEEPOOL_TORCH_PYTHON: the Python whose torch the build used (default .venv/bin/python); on a
# node without network, its own torch (docs/results/gpu-node.md shows such a build).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
install=1 build=1 quick=0
build_dir="${DEEPOOL_BUILD_DIR:-build}"
while [[ $# -gt 0 ]]; do
  case "$1" in
    --no-install) install=0 ;;
    --no-build) build=0 ;;
    --build-dir) build_dir="$2"; shift ;;
    --quick) quick=1 ;;
    -h|--help) sed -n '2,13p' "$0"; exit 0 ;;
    *) echo "gpu-node-test: unknown argument $1 (try --help)" >&2; exit 2 ;;
  esac
  shift
done

if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >/dev/null 2>&1; then
  echo "gpu-node-test: no GPU visible (nvidia-smi -L fails); this script is for GPU nodes" >&2
  exit 1
fi
gpus="$(nvidia-smi --query-gpu=index,name,memory.total,driver_version --format=csv,noheader)"
echo "gpu-node-test: GPUs:"; echo "$gpus"

if [[ $install -eq 1 ]]; then bash scripts/install-deps.sh; fi
if [[ $build -eq 1 ]]; then DEEPOOL_BUILD_DIR="$build_dir" bash scripts/build.sh; fi

out_dir="$root/docs/results"
mkdir -p "$out_dir"
report="$out_dir/gpu-node.md"
log="$(mktemp)"
bench_table="$(mktemp)"
trap 'rm -f "$log" "$bench_table"' EXIT

# The wheel's CUDA runtime must be supported by the driver.
"${DEEPOOL_TORCH_PYTHON:-$root/.venv/bin/python}" - <<'PY' | tee -a "$log"
import torch
print(f"torch {torch.__version__}, CUDA {torch.version.cuda}, "
      f"NCCL {'.'.join(map(str, torch.cuda.nccl.version()))}, "
      f"cuda.is_available() = {torch.cuda.is_available()}, devices = {torch.cuda.device_count()}")
PY

status=0
ctest --test-dir "$build_dir" -L gpu --output-on-failure 2>&1 | tee -a "$log" || status=1

bench_args=(--device cuda --markdown "$bench_table")
if [[ $quick -eq 1 ]]; then bench_args+=(--iterations 30 --warmup 5 --rounds 1); fi
bench_cmd="$build_dir/bin/deepool-bench-gpu_multiplex ${bench_args[*]}"
"$build_dir/bin/deepool-bench-gpu_multiplex" "${bench_args[@]}" 2>&1 | tee -a "$log" || status=1

{
  echo "# GPU node run"
  echo
  echo "Written by \`scripts/gpu-node-test.sh\` on $(date -u +%Y-%m-%d) at commit" \
       "$(git rev-parse --short HEAD 2>/dev/null || echo unknown); exit status $status."
  echo
  echo "GPUs (index, name, memory, driver):"
  echo
  echo '```'
  echo "$gpus"
  echo '```'
  echo
  echo "## GPU tests (\`ctest --test-dir $build_dir -L gpu\`)"
  echo
  echo '```'
  grep -E "tests passed|tests failed|Test +#|\*\*\*|Skipped|SKIP" "$log" || true
  echo '```'
  echo
  echo "## FG slowdown, deepool vs naive collocation (\`$bench_cmd\`)"
  echo
  cat "$bench_table" 2>/dev/null || echo "(the benchmark did not finish)"
} > "$report"
echo "gpu-node-test: wrote $report (exit status $status)"
exit $status
