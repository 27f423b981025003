#!/usr/bin/env bash
# Writes `deepool plan --json` for a grid of models x G x B x limits (and --exhaustive up to
# G = 16) into OUT_DIR, one file per plan, so a change to the search can be checked to leave every
# plan byte for byte the same: run it before and after, then `diff -r BEFORE AFTER`.
#
#   bench/planner/dump_plans.sh OUT_DIR [DEEPOOL_BINARY]
#
# DEEPOOL_PLAN_FLAGS adds flags to every `deepool plan`, e.g. "--granularity layers" to dump the
# plans of another search granularity beside the default's.
set -euo pipefail
out=${1:?usage: dump_plans.sh OUT_DIR [DEEPOOL_BINARY]}
deepool=${2:-$(dirname "$0")/../../build/bin/deepool}
read -r -a extra <<<"${DEEPOOL_PLAN_FLAGS:-}"
# Refusals are kept as results below, so a binary that plans nothing at all (another program, a
# flag it lacks) would fill every file with the same error and compare equal: try one plan first.
probe=$("$deepool" plan --model mlp --global-batch 32 --gpus 1 --device a100 --json \
  "${extra[@]}" 2>&1 || true)
if [[ $probe != "{"* ]]; then
  echo "dump_plans.sh: '$deepool plan ... --json' printed no plan: ${probe:0:200}" >&2
  exit 2
fi
mkdir -p "$out"
for model in vgg16 resnet50 wide_resnet101_2 inception_v3 small_cnn mlp; do
  for gpus in 1 2 3 5 6 7 8 12 16 64; do
    for batch in 32 48 64; do
      for limit in 0 1.2 1.5 2 3; do
        modes=(plain)
        if ((gpus <= 16)); then modes+=(exhaustive); fi
        for mode in "${modes[@]}"; do
          flags=()
          if [[ $mode == exhaustive ]]; then flags+=(--exhaustive); fi
          file="$out/$model-G$gpus-B$batch-L$limit-$mode.json"
          # A refusal is a result too: its message is kept in place of the plan.
          "$deepool" plan --model "$model" --global-batch "$batch" --gpus "$gpus" --device a100 \
            --amplification-limit "$limit" --json "${flags[@]}" "${extra[@]}" >"$file" 2>&1 || true
        done
      done
    done
  done
  for batch in 32 64; do
    for limit in 0 2; do
      "$deepool" plan --model "$model" --global-batch "$batch" --gpus 16 --device a100 \
        --amplification-limit "$limit" --curve --json "${extra[@]}" >"$out/$model-curve16-B$batch-L$limit.json" 2>&1 || true
    done
  done
done
ls "$out" | wc -l
