#!/usr/bin/env bash
# The first thing to run on a GPU node: builds what the node needs, runs every GPU test (CTest
# label "gpu"), checks the one-GPU cost model against measurement (each model's per-layer
# profile on this GPU, summed by `deepool plan`, and the analytical preset, against a measured
# one-GPU training iteration; and the preset per op against the profiled layers), sets deepool's
# one-GPU training beside plain PyTorch (torchvision's model trained eagerly, and a plain
# libtorch loop over deepool's own modules), times synchronised batch norm's compute against
# cuDNN's batch norm, on a node of two or more GPUs sets deepool's data parallelism beside a
# DDP-style libtorch loop over NCCL on all of them (deepool-bench-dp_vs_ddp --device cuda;
# skipped, saying so, on one GPU), runs the FG-slowdown benchmark (deepool vs naive
# collocation on one GPU), and writes what it saw to
# docs/results/gpu-node-latest.md, so the numbers can be committed as they are and carried into
# the record of all GPU runs, docs/results/gpu-node.md.
#
# Usage: scripts/gpu-node-test.sh [--no-install] [--no-build] [--build-dir DIR] [--quick] [--no-bench]
#                                 [--keep DIR] [--commit SHA]
#   --no-install   skip scripts/install-deps.sh (a node without network, dependencies present)
#   --no-build     use an existing build (e.g. one copied from a build machine)
#   --quick        a shorter benchmark (fewer iterations and rounds)
#   --no-bench     skip the FG-slowdown benchmark (GPU tests and the prediction check only)
#   --keep DIR     also leave the whole log and the layer profiles measured on this GPU (the
#                  material for a device preset) in DIR, even when a stage fails
#   --commit SHA   the commit whose tree this copy is, for the report (a node that was sent a
#                  working tree may hold a stale .git; without it the report names .git's HEAD
#                  and says that it was not given)
# Exits non-zero when there is no usable GPU, or when a GPU test, the prediction check or the
# benchmark fails.
# DEEPOOL_TORCH_PYTHON: the Python whose torch the build used (default .venv/bin/python); on a
# node without network, its own torch (docs/results/gpu-node.md says how such a node was built).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
install=1 build=1 quick=0 bench=1 keep="" commit=""
build_dir="${DEEPOOL_BUILD_DIR:-build}"
while [[ $# -gt 0 ]]; do
  case "$1" in
    --no-install) install=0 ;;
    --no-build) build=0 ;;
    --build-dir) build_dir="$2"; shift ;;
    --quick) quick=1 ;;
    --no-bench) bench=0 ;;
    --keep) keep="$2"; shift ;;
    --commit) commit="$2"; shift ;;
    -h|--help) awk 'NR > 1 && !/^#/ { exit } NR > 1' "$0"; exit 0 ;;  # the header comment
    *) echo "gpu-node-test: unknown argument $1 (try --help)" >&2; exit 2 ;;
  esac
  shift
done

if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >/dev/null 2>&1; then
  echo "gpu-node-test: no GPU visible (nvidia-smi -L fails); this script is for GPU nodes" >&2
  exit 1
fi
gpus="$(nvidia-smi --query-gpu=index,name,memory.total,driver_version --format=csv,noheader)"
gpu_count="$(nvidia-smi -L | grep -c '^GPU ' || true)"
echo "gpu-node-test: GPUs:"; echo "$gpus"

if [[ $install -eq 1 ]]; then bash scripts/install-deps.sh; fi
if [[ $build -eq 1 ]]; then DEEPOOL_BUILD_DIR="$build_dir" bash scripts/build.sh; fi

out_dir="$root/docs/results"
mkdir -p "$out_dir"
report="$out_dir/gpu-node-latest.md"
log="$(mktemp)"
bench_table="$(mktemp)"
predict_table="$(mktemp)"
baseline_table="$(mktemp)"
overhead_table="$(mktemp)"
batch_norm_table="$(mktemp)"
preset_table="$(mktemp)"
ddp_table="$(mktemp)"
work="$(mktemp -d)"
keep_material() {
  [[ -n "$keep" ]] || return 0
  mkdir -p "$keep" && cp "$log" "$keep/gpu-node.log" && cp "$work"/*.json "$keep"/ 2>/dev/null || true
}
trap 'keep_material; rm -rf "$log" "$bench_table" "$predict_table" "$baseline_table" \
  "$overhead_table" "$batch_norm_table" "$preset_table" "$ddp_table" "$work"' EXIT
python="${DEEPOOL_TORCH_PYTHON:-$root/.venv/bin/python}"
stage() { echo "gpu-node-test: $(date -u +%H:%M:%S) $*" | tee -a "$log"; }
bin="$build_dir/bin"

# The wheel's CUDA runtime must be supported by the driver.
"$python" - <<'PY' | tee -a "$log"
import torch
print(f"torch {torch.__version__}, CUDA {torch.version.cuda}, "
      f"NCCL {'.'.join(map(str, torch.cuda.nccl.version()))}, "
      f"cuda.is_available() = {torch.cuda.is_available()}, devices = {torch.cuda.device_count()}")
PY

status=0
stage "GPU tests"
ctest --test-dir "$build_dir" -L gpu --output-on-failure 2>&1 | tee -a "$log" || status=1

# One-GPU prediction. The analytical column exists only where the planner has a preset for the
# card.
gpu_name="$(nvidia-smi --query-gpu=name --format=csv,noheader | head -n 1)"
preset=""
case "$gpu_name" in
  *H100*) preset=h100 ;;
  *H200*) preset=h200 ;;
  *A100*) preset=a100 ;;
  *V100*) preset=v100 ;;
esac
median_iteration_ms() {  # deepool-train --json events on stdin; iterations after the warm-up
  python3 -c '
import json, statistics, sys
warmup = int(sys.argv[1])
times = [e["iteration_ms"] for e in map(json.loads, filter(str.strip, sys.stdin))
         if e.get("event") == "iteration" and e["iteration"] >= warmup]
print(f"{statistics.median(times):.2f}" if times else "nan")' "$1"
}
single_device_ms() {  # deepool plan --json on stdin
  python3 -c 'import json, sys; print("%.2f" % json.load(sys.stdin)["single_device_ms"])'
}
error_pct() {  # predicted measured
  python3 -c 'import sys; p, m = map(float, sys.argv[1:3]); print("%+.1f %%" % (100 * (p - m) / m))' "$1" "$2"
}
{
  echo "| model | batch | measured ms | with launch: layers ms | error |" \
       "device: layers ms | error | device: layers + overhead ms | error |" \
       "analytical ${preset:-(none)} ms | error |"
  echo "|---|---|---|---|---|---|---|---|---|---|---|"
} > "$predict_table"
{
  echo "| model | batch | deepool-train ms | PyTorch eager ms | deepool / PyTorch |"
  echo "|---|---|---|---|---|"
} > "$baseline_table"
ratio() {  # numerator denominator
  python3 -c 'import sys; a, b = map(float, sys.argv[1:3]); print("%.3f" % (a / b))' "$1" "$2"
}
layer_sum_ms() {  # profile batch: the layers' forward + backward at that batch
  python3 -c '
import json, sys
profile = json.load(open(sys.argv[1]))
batch = int(sys.argv[2])
print("%.2f" % sum(p["forward_ms"] + p["backward_ms"] for layer in profile["layers"]
                   for p in layer["batches"] if p["batch"] == batch))' "$1" "$2"
}
# model batch timing [profiler flags]: profile on this GPU, then the planner's one-GPU time
profile_sum_ms() {
  "$bin/deepool" profile --model "$1" --device cuda:0 --device-name "${preset:-cuda}" \
    --batch-sizes "$2" --cuda-timing "$3" "${@:4}" -o "$work/$1-$3.json" >>"$log" 2>&1 &&
    "$bin/deepool" plan --model "$1" --profile "$work/$1-$3.json" --gpus 1 --global-batch "$2" \
      --json 2>>"$log" | single_device_ms
}
for case_ in "vgg16 32" "resnet50 32" "inception_v3 32" "wide_resnet101_2 16"; do
  read -r model batch <<<"$case_"
  stage "one-GPU prediction, $model batch $batch"
  if ! measured="$("$bin/deepool-train" --model "$model" --num-classes 1000 --device cuda \
         --ranks 1 --global-batch "$batch" --iterations 40 --json 2>>"$log" |
         median_iteration_ms 10)" ||
     ! launch_sum="$(profile_sum_ms "$model" "$batch" with-launch --no-iteration-overhead)" ||
     ! device_total="$(profile_sum_ms "$model" "$batch" device)" ||
     ! device_sum="$(layer_sum_ms "$work/$model-device.json" "$batch")"; then
    echo "| $model | $batch | failed (see the log) | | | | | | | | |" >> "$predict_table"
    status=1
    continue
  fi
  analytical="" analytical_error=""
  if [[ -n "$preset" ]] && analytical="$("$bin/deepool" plan --model "$model" --device "$preset" \
       --gpus 1 --global-batch "$batch" --json 2>>"$log" | single_device_ms)"; then
    analytical_error="$(error_pct "$analytical" "$measured")"
  fi
  echo "| $model | $batch | $measured | $launch_sum | $(error_pct "$launch_sum" "$measured") |" \
       "$device_sum | $(error_pct "$device_sum" "$measured") |" \
       "$device_total | $(error_pct "$device_total" "$measured") |" \
       "$analytical | $analytical_error |" >> "$predict_table"
  if eager="$("$python" bench/runtime/torch_eager_baseline.py "$model" "$batch" --device cuda \
         --iterations 40 --warmup 10 2>>"$log")"; then
    echo "| $model | $batch | $measured | $eager | $(ratio "$measured" "$eager") |" >> "$baseline_table"
  else
    echo "| $model | $batch | $measured | failed (see the log) | |" >> "$baseline_table"
  fi
  tail -q -n 1 "$predict_table" "$baseline_table"
done
cat "$predict_table" "$baseline_table" | tee -a "$log"

# The analytical preset against this GPU's device-timed layers, per op and per model: material
# for refitting it (docs/benchmarks.md, "H100 and H200 presets"). Informative: it fails nothing.
validation_cmd=""
if [[ -n "$preset" && -x "$bin/deepool-bench-profile-validation" ]]; then
  validation_cmd="$bin/deepool-bench-profile-validation --device $preset --skip-ops dropout"
  validation_cmd+=" --batches 32"
  for case_ in vgg16 resnet50 inception_v3 wide_resnet101_2; do
    if [[ -s "$work/$case_-device.json" ]]; then
      validation_cmd+=" $case_=$work/$case_-device.json"
    fi
  done
  stage "the $preset preset against this GPU's layers"
  $validation_cmd > "$preset_table" 2>>"$log" || echo "(failed: see the log)" >> "$preset_table"
else
  echo "(not run: no preset for this GPU, or deepool-bench-profile-validation not built)" \
    > "$preset_table"
fi

# Runs a benchmark command (a string, split on spaces) into a Markdown table file; a failure is
# noted in the table and fails the run.
table_stage() {
  local name="$1" table="$2" cmd="$3"
  stage "$name"
  if ! $cmd > "$table" 2>>"$log"; then
    echo "(failed: see the log)" >> "$table"
    status=1
  fi
  cat "$table" | tee -a "$log"
}

overhead_cmd="$bin/deepool-bench-executor_overhead 10 6 --device cuda"
table_stage "executor overhead, one GPU" "$overhead_table" "$overhead_cmd"
batch_norm_cmd="$bin/deepool-bench-batch_norm --device cuda --batch 32 --image-size 224"
table_stage "synchronised batch norm's compute, one GPU" "$batch_norm_table" "$batch_norm_cmd"
# Data parallelism as a user would otherwise run it (DDP's buckets, overlapped with backward)
# needs two or more GPUs: ResNet-50 at 224x224, 32 samples a GPU.
if (( gpu_count >= 2 )); then
  ddp_cmd="$bin/deepool-bench-dp_vs_ddp --device cuda --ranks $gpu_count --model resnet50"
  ddp_cmd+=" --batch $((32 * gpu_count)) --image-size 224 --classes 1000 --iterations 10 --trials 5"
  table_stage "data parallelism vs a DDP-style loop, $gpu_count GPUs" "$ddp_table" "$ddp_cmd"
else
  ddp_cmd="deepool-bench-dp_vs_ddp --device cuda --ranks G"
  echo "(not run: it needs two or more GPUs, and this node has $gpu_count)" > "$ddp_table"
fi

bench_args=(--device cuda --markdown "$bench_table")
if [[ $quick -eq 1 ]]; then bench_args+=(--iterations 30 --warmup 5 --rounds 1); fi
bench_cmd="$build_dir/bin/deepool-bench-gpu_multiplex ${bench_args[*]}"
if [[ $bench -eq 1 ]]; then
  stage "FG-slowdown benchmark"
  "$build_dir/bin/deepool-bench-gpu_multiplex" "${bench_args[@]}" 2>&1 | tee -a "$log" || status=1
else
  echo "(not run: --no-bench)" > "$bench_table"
fi

{
  echo "# GPU node run"
  echo
  if [[ -n "$commit" ]]; then
    source_line="the tree of commit $commit (--commit)"
  else
    source_line="commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown) (this copy's .git,"
    source_line+=" which a node sent a working tree may hold stale: pass --commit)"
  fi
  echo "Written by \`scripts/gpu-node-test.sh\` on $(date -u +%Y-%m-%d) from $source_line;" \
       "exit status $status."
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
  echo "## One-GPU iteration: measured against the cost model"
  echo
  echo "Measured: \`deepool-train --model M --device cuda --ranks 1 --global-batch B"
  echo "--iterations 40\`, the median of iterations 10-39. Profile sum: \`deepool profile --device"
  echo "cuda:0 --batch-sizes B --cuda-timing T\` on this GPU, then \`deepool plan --profile P --gpus"
  echo "1\`'s single_device_ms (the layers' forward and backward, each timed alone; T = device,"
  echo "the default: the kernels' GPU time, launches queued; with-launch: each layer as issued,"
  echo "its launch latency included). \"layers\" is that sum alone (with launch: profiled with"
  echo "--no-iteration-overhead); \"layers + overhead\" adds the profile's iteration overhead, a"
  echo "one-rank executor iteration on this GPU minus the layers, so for one GPU it mostly checks"
  echo "that the profiler's iteration agrees with deepool-train's."
  echo "Analytical: \`deepool plan --device $preset --gpus 1\`. Error: (predicted - measured) /"
  echo "measured."
  echo
  cat "$predict_table"
  echo
  echo "## One GPU: deepool against plain PyTorch"
  echo
  echo "PyTorch eager: \`bench/runtime/torch_eager_baseline.py M B --device cuda\` (torchvision's"
  echo "model, the same SGD, a pinned synthetic batch; median of iterations 10-39), beside the"
  echo "measured deepool-train iteration above."
  echo
  cat "$baseline_table"
  echo
  echo "Executor against a plain libtorch loop over the same modules, data and optimizer, and"
  echo "(last two columns) against the executor fed pageable instead of pinned batches"
  echo "(\`$overhead_cmd\`; medians of 6 alternating trials of 10 iterations):"
  echo
  cat "$overhead_table"
  echo
  echo "## The analytical preset against this GPU's layers"
  echo
  echo "\`${validation_cmd:-deepool-bench-profile-validation}\` on the device-timed profiles above:"
  echo
  cat "$preset_table"
  echo
  echo "## Synchronised batch norm's compute against cuDNN's batch norm (\`$batch_norm_cmd\`)"
  echo
  echo "Forward and backward of one layer at ResNet-50's shapes, the group sum a group of one;"
  echo "medians of 21 alternating repetitions, ms:"
  echo
  cat "$batch_norm_table"
  echo
  echo "## Data parallelism against a DDP-style libtorch loop over NCCL (\`$ddp_cmd\`)"
  echo
  echo "Every rank a thread on its own GPU; the loop buckets gradients as DDP does and starts each"
  echo "bucket's all-reduce from autograd hooks; medians of alternating trials, ms per iteration"
  echo "and throughput against the loop:"
  echo
  echo '```'
  cat "$ddp_table"
  echo '```'
  echo
  echo "## FG slowdown, deepool vs naive collocation (\`$bench_cmd\`)"
  echo
  cat "$bench_table" 2>/dev/null || echo "(the benchmark did not finish)"
} > "$report"
echo "gpu-node-test: wrote $report (exit status $status)"
exit $status
