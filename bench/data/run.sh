#!/usr/bin/env bash
# The image pipeline side by side with torchvision's DataLoader (docs/benchmarks.md, "Image
# pipeline"): ResNet-50's training transforms (random resized crop to 224, flip) on an
# ImageNet-like folder of JPEGs, with T threads (deepool) or T worker processes (torchvision),
# each pinned to the same T cores (taskset), for T = 1 and all cores; the three runs alternate,
# in a rotating order, for R rounds.
#   bash bench/data/run.sh [--images DIR] [--rounds R] [--batch B] [--batches N]
# Needs the build (deepool-bench-image-pipeline) and the project's .venv. The images are made
# once, into build/bench-data-images unless --images names a folder.
set -euo pipefail
SCRIPT=$(realpath "$0")
cd "$(dirname "$SCRIPT")/../.."
BUILD_DIR=${DEEPOOL_BUILD_DIR:-build}
IMAGES="$BUILD_DIR/bench-data-images"
ROUNDS=3
BATCH=64
BATCHES=8
while [[ $# -gt 0 ]]; do
  case "$1" in
    --images) IMAGES=$2; shift 2 ;;
    --rounds) ROUNDS=$2; shift 2 ;;
    --batch) BATCH=$2; shift 2 ;;
    --batches) BATCHES=$2; shift 2 ;;
    -h|--help) sed -n '2,9p' "$SCRIPT"; exit 0 ;;
    *) echo "run.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
done
PYTHON=.venv/bin/python
BENCH="$BUILD_DIR/bin/deepool-bench-image-pipeline"
[[ -x "$BENCH" ]] || { echo "run.sh: no $BENCH (build it first)" >&2; exit 2; }
[[ -d "$IMAGES" ]] || "$PYTHON" bench/data/make_photo_images.py "$IMAGES"

echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
echo "date: $(date -u '+%F %H:%M UTC')"
echo "images: $IMAGES ($(find "$IMAGES" -name '*.jpg' | wc -l) JPEGs, mean $(find "$IMAGES" -name '*.jpg' -printf '%s\n' | awk '{s+=$1} END {printf "%.0f", s/NR/1000}') KB)"
echo "batch $BATCH, $BATCHES batches timed after 1, $ROUNDS rounds"
echo
echo "Images/s: median of the rounds (min-max); per core: that median / the cores."
echo "deepool's work ends at uint8 (training normalises on the GPU); torchvision's ends with"
echo "ToTensor+Normalize on the CPU, as users run it; \"to uint8\" ends at PILToTensor instead."
echo

# One run of pipeline $1 (0 deepool, 1 torchvision, 2 torchvision to uint8) on cores 0..$2-1.
run() {
  local args=("$IMAGES" --threads "$2" --batch "$BATCH" --batches "$BATCHES" --warmup 1)
  local cmd
  case "$1" in
    0) cmd=("$BENCH" "${args[@]}" --seed "$3") ;;
    1) cmd=("$PYTHON" bench/data/torchvision_loader.py "${args[@]}") ;;
    2) cmd=("$PYTHON" bench/data/torchvision_loader.py "${args[@]}" --to-uint8) ;;
  esac
  taskset -c "0-$(($2 - 1))" "${cmd[@]}" | sed -n 's/.*"images_per_s": \([0-9.]*\).*/\1/p'
}
# "median min max" of the numbers on stdin.
stats() { sort -g | awk '{v[NR] = $1} END {print v[int((NR + 1) / 2)], v[1], v[NR]}'; }

echo "| threads / workers | deepool | torchvision | torchvision to uint8 | per core: deepool | torchvision | to uint8 | deepool / torchvision | deepool / to uint8 |"
echo "|---|---|---|---|---|---|---|---|---|"
for threads in $(printf '%s\n' 1 "$(nproc)" | sort -un); do
  rates=("" "" "")
  for ((round = 0; round < ROUNDS; round++)); do
    for ((k = 0; k < 3; k++)); do
      p=$(((round + k) % 3))
      rates[p]+="$(run "$p" "$threads" "$round") "
    done
  done
  read -r o o_lo o_hi < <(tr ' ' '\n' <<<"${rates[0]}" | grep . | stats)
  read -r t t_lo t_hi < <(tr ' ' '\n' <<<"${rates[1]}" | grep . | stats)
  read -r u u_lo u_hi < <(tr ' ' '\n' <<<"${rates[2]}" | grep . | stats)
  awk -v n="$threads" -v o="$o" -v t="$t" -v u="$u" -v r="$o_lo $o_hi $t_lo $t_hi $u_lo $u_hi" '
    BEGIN {
      split(r, x, " ")
      printf "| %d | %.0f (%.0f-%.0f) | %.0f (%.0f-%.0f) | %.0f (%.0f-%.0f) | %.0f | %.0f | %.0f | %.2fx | %.2fx |\n",
             n, o, x[1], x[2], t, x[3], x[4], u, x[5], x[6], o / n, t / n, u / n, o / t, o / u
    }'
done
