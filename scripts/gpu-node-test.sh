#!/usr/bin/env bash
# The first thing to run on a GPU node: builds the GPU targets (from the node's own headers, or
# from the pack scripts/pack-gpu-node.sh made on a machine with network, against the node's own
# torch when the pinned wheel is absent), runs every GPU test (CTest label "gpu"; among them, on
# one GPU too, the executor's multi-rank CUDA paths with ranks sharing the GPU over the staging
# communicator, executor_shared_gpu_test, and NCCL in a world of one, communicator_nccl_gpu_test;
# the report lists every test and its outcome), checks the
# one-GPU cost model against measurement (each model's per-layer profile on this GPU, summed by
# `deepool plan`, and the analytical preset, against a measured one-GPU training iteration; and
# the preset per op against the profiled layers), sets deepool's one-GPU training beside plain
# PyTorch (torchvision's model trained eagerly, and a plain libtorch loop over deepool's own
# modules; ResNet-50, ViT-B/16 and GPT-2 small at tf32 and bf16 against bench/runtime/
# pytorch_loop.py, with both peaks of memory and the memory model's prediction), times synchronised batch norm's compute against cuDNN's batch norm, on a node of two
# or more GPUs sets deepool's data parallelism beside a DDP-style libtorch loop over NCCL on all
# of them (deepool-bench-dp_vs_ddp --device cuda; skipped, saying so, on one GPU), works out how
# many of the node's cores the image pipeline needs to feed this GPU at the training speeds it
# measured (ResNet-50 and ViT-B/16 at tf32 and bf16), runs the FG-slowdown benchmark (deepool
# vs naive collocation on one GPU), and
# writes what it saw, with the node's GPU, driver, CUDA, torch and NCCL versions and the tree it
# ran (HEAD and a hash of the files), to docs/results/gpu-node-latest.md (and $OUT/ when OUT is
# set), so the numbers can be committed as they are and carried into the record of all GPU
# runs, docs/results/gpu-node.md.
#
# Usage: scripts/gpu-node-test.sh [--install] [--no-build] [--build-dir DIR] [--pack FILE]
#                                 [--deps-prefix DIR] [--unpack-all] [--no-gpu] [--targets "T ..."]
#                                 [--quick] [--no-bench] [--keep DIR] [--commit SHA]
#                                 [--report FILE] [--source-identity]
#   --install      first run scripts/install-deps.sh (a node with network, as root)
#   --no-build     use an existing build in --build-dir
#   --build-dir    where to build (default build-gpu)
#   --pack FILE    the dependency pack (default gpu-node-pack/gpu-node-deps.tar.gz, used when
#                  present): the groups the node lacks are unpacked into --deps-prefix (default
#                  BUILD_DIR/deps) and the build is configured with it
#   --unpack-all   unpack every group of the pack, also those the node has (to check the pack)
#   --no-gpu       prepare and build only, then write the report: no GPU needed (checks the
#                  build path on a machine without one; the comparison with plain PyTorch runs
#                  on CPU with tiny models, to check that stage)
#   --targets      build these instead of the GPU targets
#   --quick        a shorter benchmark (fewer iterations and rounds)
#   --no-bench     skip the FG-slowdown benchmark (GPU tests and the prediction check only)
#   --keep DIR     also leave the whole log and the layer profiles measured on this GPU (the
#                  material for a device preset) in DIR, even when a stage fails
#   --commit SHA   the commit the sender says this tree is, for the report (the report always
#                  names the copied .git's HEAD and the hash of the files, which settle it)
#   --report FILE  write the report there (default docs/results/gpu-node-latest.md)
#   --source-identity  print HEAD, the tree hash of the files and the count of files that differ
#                  from HEAD, then exit: run it on the sending machine to match a report's tree
# Exits non-zero when there is no usable GPU (unless --no-gpu), when a dependency is missing
# with no pack to supply it (the message names it), when the build fails, or when a GPU test,
# the prediction check or the benchmark fails.
# DEEPOOL_TORCH_PYTHON: the Python whose torch to build against (default: .venv/bin/python when
# it imports torch, else the node's python3). GPU_NODE_SYSTEM_ROOT (tests of this script): the
# root under which the node's own headers are looked for (default /).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
# shellcheck source=scripts/gpu-node-prepare.sh
source scripts/gpu-node-prepare.sh
# shellcheck source=scripts/gpu-node-compare.sh
source scripts/gpu-node-compare.sh
install=0 build=1 quick=0 bench=1 keep="" commit="" no_gpu=0 unpack_all=0 targets=gpu
build_dir="${DEEPOOL_BUILD_DIR:-build-gpu}"
pack="gpu-node-pack/gpu-node-deps.tar.gz" deps_prefix="" report=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    --install) install=1 ;;
    --no-install) ;;  # the default since the pack; kept for old command lines
    --no-build) build=0 ;;
    --build-dir) build_dir="$2"; shift ;;
    --pack) pack="$2"; shift ;;
    --deps-prefix) deps_prefix="$2"; shift ;;
    --unpack-all) unpack_all=1 ;;
    --no-gpu) no_gpu=1 ;;
    --targets) targets="$2"; shift ;;
    --quick) quick=1 ;;
    --no-bench) bench=0 ;;
    --keep) keep="$2"; shift ;;
    --commit) commit="$2"; shift ;;
    --report) report="$2"; shift ;;
    --source-identity)
      gpu_node_source_identity || true
      echo "head $gpu_node_head tree $gpu_node_tree files_differing_from_head $gpu_node_changed"
      exit 0 ;;
    -h|--help) awk 'NR > 1 && !/^#/ { exit } NR > 1' "$0"; exit 0 ;;
    *) echo "gpu-node-test: unknown argument $1 (try --help)" >&2; exit 2 ;;
  esac
  shift
done
deps_prefix="$(realpath -m "${deps_prefix:-$build_dir/deps}")"

report="${report:-docs/results/gpu-node-latest.md}"
mkdir -p "$(dirname "$report")"
log="$(mktemp)"
bench_table="$(mktemp)"
predict_table="$(mktemp)"
baseline_table="$(mktemp)"
overhead_table="$(mktemp)"
batch_norm_table="$(mktemp)"
memory_format_table="$(mktemp)"
preset_table="$(mktemp)"
ddp_table="$(mktemp)"
cores_table="$(mktemp)"
compare_table="$(mktemp)"
work="$(mktemp -d)"
keep_material() {
  [[ -n "$keep" ]] || return 0
  mkdir -p "$keep" && cp "$log" "$keep/gpu-node.log" && cp "$work"/*.json "$keep"/ 2>/dev/null || true
}
# Where the device tool runs a command, what it writes under $OUT comes back: the log too.
copy_to_out() { [[ -n "${OUT:-}" && -d "${OUT:-}" ]] && cp "$log" "$OUT/gpu-node.log" || true; }
trap 'keep_material; copy_to_out; rm -rf "$log" "$bench_table" "$predict_table" "$baseline_table" \
  "$overhead_table" "$batch_norm_table" "$memory_format_table" "$preset_table" "$ddp_table" "$cores_table" \
  "$compare_table" "$work"' EXIT
# Everything the script and its commands print goes to the console and to the log.
exec > >(tee -a "$log") 2>&1
stage() { echo "gpu-node-test: $(date -u +%H:%M:%S) $*"; }
bin="$build_dir/bin"

gpus="(none: --no-gpu)" gpu_count=0
if [[ $no_gpu -eq 0 ]]; then
  if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >/dev/null 2>&1; then
    echo "gpu-node-test: no GPU visible (nvidia-smi -L fails); this script is for GPU nodes" \
         "(--no-gpu checks the build path without one)" >&2
    exit 1
  fi
  gpus="$(nvidia-smi --query-gpu=index,name,memory.total,driver_version --format=csv,noheader)"
  gpu_count="$(nvidia-smi -L | grep -c '^GPU ' || true)"
fi
echo "gpu-node-test: GPUs:"; echo "$gpus"

# Before anything writes into the tree (the report, a build folder is ignored anyway).
gpu_node_source_identity || echo "gpu-node-test: could not hash the tree (no git?)"
echo "gpu-node-test: HEAD $gpu_node_head, tree $gpu_node_tree," \
     "$gpu_node_changed files differ from HEAD"
commit_label="${commit:-${gpu_node_head:0:12}}"
if [[ "$gpu_node_changed" != 0 ]]; then commit_label+="+tree-${gpu_node_tree:0:12}"; fi

if [[ $install -eq 1 ]]; then bash scripts/install-deps.sh; fi
gpu_node_choose_torch
python="$gpu_node_python"
gpu_node_prefix="" gpu_node_from_pack="" gpu_node_from_system="" gpu_node_build_s=""
if [[ $build -eq 1 ]]; then
  gpu_node_prepare_deps "$pack" "$deps_prefix" "$unpack_all"
  gpu_node_configure_and_build "$build_dir" "$commit_label" "$targets"
fi

# The versions every run records (docs/results/gpu-node.md keeps them for each run). The
# wheel's CUDA runtime must be supported by the driver: cuda.is_available() says whether it is.
versions="$("$python" - <<'PY'
import torch
nccl = "none"
try:
    nccl = ".".join(map(str, torch.cuda.nccl.version()))
except Exception:
    pass
print(f"torch {torch.__version__}, CUDA {torch.version.cuda or 'none'}, NCCL {nccl}, "
      f"cuda.is_available() = {torch.cuda.is_available()}, devices = {torch.cuda.device_count()}")
PY
)"
echo "$versions"
nvcc_version="$( (nvcc --version 2>/dev/null || true) | sed -n 's/.*release \([0-9.]*\).*/\1/p')"
cpu_model="$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
environment_section() {
  echo "Written by \`scripts/gpu-node-test.sh\` on $(date -u '+%F %H:%M UTC'); exit status $status."
  echo
  echo "| | |"
  echo "|---|---|"
  echo "| tree | HEAD $gpu_node_head of the copied .git; files hashed: tree $gpu_node_tree," \
       "$gpu_node_changed files differ from HEAD (on the sender, the commit whose tree this is:" \
       "the one \`git log --format='%h %T'\` lists beside it) |"
  echo "| commit the sender named (--commit) | ${commit:-(not given)} |"
  echo "| GPUs (index, name, memory, driver) | $(paste -sd ';' <<<"$gpus") |"
  echo "| torch, CUDA, NCCL | $versions |"
  echo "| built against | $gpu_node_torch_note |"
  echo "| nvcc | ${nvcc_version:-(none)} |"
  echo "| CPU | $(nproc) cores, $cpu_model |"
  echo "| build | ${gpu_node_build_s:-(not built: --no-build)} s in $build_dir; dependencies from" \
       "the pack: ${gpu_node_from_pack:-nothing}; from the node: ${gpu_node_from_system:-nothing} |"
  echo
}
publish_report() {
  if [[ -n "${OUT:-}" && -d "${OUT:-}" ]]; then cp "$report" "$OUT/$(basename "$report")"; fi
  echo "gpu-node-test: wrote $report (exit status $status)"
}
# Cores per GPU (issue 42): how many of this node's cores the image pipeline
# (deepool-bench-image-pipeline: ResNet-50's training transforms on generated ImageNet-like
# JPEGs, docs/benchmarks.md section (i)) needs to keep up with this GPU's training rate. An
# estimate from two measurements taken apart on the same node: the pipeline does not feed the
# GPU while it trains. The rate per core is the all-core rate / the cores (the lower of the two
# readings: threads scale less than linearly); one core's rate is shown beside it.
# Rows of "model precision batch ms" (ms: the median training iteration, or a reason it is
# missing) are collected in gpu_rates, then cores_per_gpu_table turns them into a table.
gpu_rates=()
pipeline_rate() {  # threads: median images/s of 3 runs on cores 0..threads-1
  local threads="$1" round rates=() pin=()
  if command -v taskset >/dev/null; then pin=(taskset -c "0-$((threads - 1))"); fi
  for round in 1 2 3; do
    rates+=("$("${pin[@]}" "$bin/deepool-bench-image-pipeline" "$work/images" --threads "$threads" \
      --batch 64 --batches $((8 * threads)) --warmup 1 --seed "$round" 2>>"$log" |
      sed -n 's/.*"images_per_s": \([0-9.]*\).*/\1/p')")
  done
  printf '%s\n' "${rates[@]}" | sort -g | sed -n 2p
}
cores_per_gpu_table() {
  local cores one all per_core row model precision batch ms
  cores="$(nproc)"
  echo "| model | precision | batch | GPU ms / iteration | GPU images/s |" \
       "cores needed at $cores cores' rate | cores needed at one core's rate |"
  echo "|---|---|---|---|---|---|---|"
  if [[ ! -x "$bin/deepool-bench-image-pipeline" ]] ||
     ! "$python" bench/data/make_photo_images.py "$work/images" >>"$log" 2>&1 ||
     ! one="$(pipeline_rate 1)" || ! all="$(pipeline_rate "$cores")" || [[ -z "$one" || -z "$all" ]]; then
    echo "| (the image pipeline's rate was not measured: see the log) | | | | | | |"
    return 1
  fi
  per_core="$(python3 -c "import sys; print('%.1f' % (float(sys.argv[1]) / int(sys.argv[2])))" "$all" "$cores")"
  pipeline_line="image pipeline on this node: $one images/s on 1 core, $all on $cores"
  pipeline_line+=" ($per_core per core)"
  for row in "${gpu_rates[@]}"; do
    read -r model precision batch ms <<<"$row"
    if [[ ! "$ms" =~ ^[0-9.]+$ ]]; then
      echo "| $model | $precision | $batch | $ms | | | |"
      continue
    fi
    python3 - "$model" "$precision" "$batch" "$ms" "$per_core" "$one" <<'PY'
import sys
model, precision, batch, ms, per_core, one = sys.argv[1:]
rate = int(batch) * 1000 / float(ms)
print(f"| {model} | {precision} | {batch} | {float(ms):.2f} | {rate:,.0f} | "
      f"{rate / float(per_core):.1f} | {rate / float(one):.1f} |")
PY
  done
}

status=0
cores_section() {
  echo "## Cores per GPU: the image pipeline against this GPU's training rate"
  echo
  echo "GPU: deepool-train's rows of the comparison with plain PyTorch (median of iterations"
  echo "10-39; tf32 and bf16). Pipeline:"
  echo "\`deepool-bench-image-pipeline IMAGES --threads T --batch 64 --batches 8T\` on cores"
  echo "0..T-1 (taskset), median of 3 runs, on 512 JPEGs of \`bench/data/make_photo_images.py\`."
  echo "Cores needed = GPU images/s / the pipeline's images/s per core: an estimate from two"
  echo "measurements on this node, not a run of the pipeline feeding the GPU. ${pipeline_line:-}"
  echo
  cat "$cores_table"
  echo
}
if [[ $no_gpu -eq 1 ]]; then
  if [[ -x "$bin/deepool-bench-image-pipeline" ]]; then
    stage "image pipeline per core (cores per GPU; no GPU rate: --no-gpu)"
    gpu_rates=("resnet50 fp32 32 (not measured: --no-gpu)")
    cores_per_gpu_table > "$cores_table" || status=1
  fi
  if [[ -x "$bin/deepool-train" && -x "$bin/deepool" ]]; then
    stage "deepool-train against the plain PyTorch loop, on CPU with tiny models (--no-gpu)"
    gpu_node_compare_table cpu cpu 4 1 "vit_tiny fp32 4" "gpt_tiny bf16 2" > "$compare_table" ||
      status=1
    cat "$compare_table"
  fi
  {
    echo "# GPU node run (--no-gpu: build path only)"
    echo
    environment_section
    if [[ -s "$compare_table" ]]; then
      echo "## deepool-train against a plain PyTorch loop, on CPU (checks the stage only)"
      echo
      cat "$compare_table"
      echo
    fi
    if [[ -s "$cores_table" ]]; then cores_section; fi
  } > "$report"
  publish_report
  exit $status
fi

stage "GPU tests"
ctest --test-dir "$build_dir" -L gpu --output-on-failure 2>&1 || status=1

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
# deepool-train's default on cuda is bf16 where it has --precision: the fp32 measurements ask for
# tf32, the closest to what it ran before (cuDNN's TF32 convolutions, PyTorch's default, which
# the profiles below also run under).
fp32_flags=() fp32_name=fp32
if grep -q -- --precision <<<"$("$bin/deepool-train" --help 2>/dev/null || true)"; then
  fp32_flags=(--precision tf32) fp32_name=tf32
fi
for case_ in "vgg16 32" "resnet50 32" "inception_v3 32" "wide_resnet101_2 16"; do
  read -r model batch <<<"$case_"
  stage "one-GPU prediction, $model batch $batch"
  if ! measured="$("$bin/deepool-train" --model "$model" --num-classes 1000 --device cuda \
         --ranks 1 --global-batch "$batch" --iterations 40 --json "${fp32_flags[@]}" 2>>"$log" |
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
  if eager="$("$python" bench/runtime/pytorch_loop.py --model "$model" --batch "$batch" \
         --device cuda --precision "$fp32_name" --iterations 40 --warmup 10 2>>"$log" |
         "$python" -c 'import json, sys; print("%.2f" % json.load(sys.stdin)["median_iteration_ms"])')"
  then
    echo "| $model | $batch | $measured | $eager | $(ratio "$measured" "$eager") |" >> "$baseline_table"
  else
    echo "| $model | $batch | $measured | failed (see the log) | |" >> "$baseline_table"
  fi
  tail -q -n 1 "$predict_table" "$baseline_table"
done
cat "$predict_table" "$baseline_table"

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
  cat "$table"
}

overhead_cmd="$bin/deepool-bench-executor_overhead 10 6 --device cuda"
table_stage "executor overhead, one GPU" "$overhead_table" "$overhead_cmd"
batch_norm_cmd="$bin/deepool-bench-batch_norm --device cuda --batch 32 --image-size 224"
table_stage "synchronised batch norm's compute, one GPU" "$batch_norm_table" "$batch_norm_cmd"
# The memory_format "auto" default on CUDA (channels_last for convolutional models at 16 bits)
# rests on this row: ResNet-50 at bf16, batch 128, trained in both formats.
memory_format_cmd="$bin/deepool-bench-memory_format 5 4 --device cuda --precision bf16 --case resnet50:128"
table_stage "channels_last against contiguous, one GPU" "$memory_format_table" "$memory_format_cmd"
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

# deepool-train against the plain PyTorch loop (bench/runtime/pytorch_loop.py, the same
# settings; scripts/gpu-node-compare.sh), with both peaks of memory and the memory model's
# prediction; its image models' rates feed cores per GPU below.
compare_rows=("resnet50 tf32 32" "resnet50 bf16 32" "vit_b_16 tf32 32" "vit_b_16 bf16 32"
              "gpt2 tf32 8" "gpt2 bf16 8")
stage "deepool-train against the plain PyTorch loop"
gpu_node_compare_rates=()
gpu_node_compare_table cuda "$preset" 40 10 "${compare_rows[@]}" > "$compare_table" || status=1
cat "$compare_table"
gpu_rates+=("${gpu_node_compare_rates[@]}")
stage "image pipeline per core (cores per GPU)"
cores_per_gpu_table > "$cores_table" || status=1
cat "$cores_table"

bench_args=(--device cuda --markdown "$bench_table")
if [[ $quick -eq 1 ]]; then bench_args+=(--iterations 30 --warmup 5 --rounds 1); fi
bench_cmd="$build_dir/bin/deepool-bench-gpu_multiplex ${bench_args[*]}"
if [[ $bench -eq 1 ]]; then
  stage "FG-slowdown benchmark"
  "$build_dir/bin/deepool-bench-gpu_multiplex" "${bench_args[@]}" 2>&1 || status=1
else
  echo "(not run: --no-bench)" > "$bench_table"
fi

{
  echo "# GPU node run"
  echo
  environment_section
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
  echo "PyTorch eager: \`bench/runtime/pytorch_loop.py --model M --batch B --device cuda"
  echo "--precision $fp32_name\` (torchvision's model, the same SGD, a pinned synthetic batch; median"
  echo "of iterations 10-39), beside the measured deepool-train iteration above."
  echo
  cat "$baseline_table"
  echo
  echo "At tf32 and bf16, ResNet-50, ViT-B/16 (batch 32) and GPT-2 small (batch 8 of 1,024"
  echo "tokens): \`deepool-train --model M --device cuda --ranks 1 --global-batch B --iterations"
  echo "40 --precision P --optimizer sgd --lr 0.01 --momentum 0.9 --json\` (synthetic images; GPT-2"
  echo "a file of random token ids) against \`bench/runtime/pytorch_loop.py --model M --batch B"
  echo "--precision P --optimizer sgd --lr 0.01 --momentum 0.9\` (random ids for GPT-2), medians"
  echo "of iterations 10-39. PyTorch / deepool: PyTorch's ms over deepool's (issue 43's target:"
  echo "at least 0.95). Peaks: deepool's iteration events' peak_memory_bytes, the loop's"
  echo "torch.cuda.max_memory_allocated; predicted: rank 0 of \`deepool plan --model M --gpus 1"
  echo "--global-batch B --precision P --device ${preset:-PRESET} --optimizer sgd\`."
  echo
  cat "$compare_table"
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
  echo "## channels_last against contiguous training (\`$memory_format_cmd\`)"
  echo
  echo "One rank through the executor in each memory format, medians of 4 alternating trials of 5"
  echo "iterations (below 1: channels_last faster; the memory_format auto default assumes it is),"
  echo "then the copies a boundary conversion would add to each re-split piece:"
  echo
  cat "$memory_format_table"
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
  cores_section
  echo "## FG slowdown, deepool vs naive collocation (\`$bench_cmd\`)"
  echo
  cat "$bench_table" 2>/dev/null || echo "(the benchmark did not finish)"
} > "$report"
publish_report
exit $status
