# shellcheck shell=bash disable=SC2034,SC2154  # variables shared with the sourcing script
# Sourced by scripts/gpu-node-test.sh (not run on its own): deepool-train against the plain
# PyTorch loop a user would run (bench/runtime/pytorch_loop.py; issue 41 point 10, issue 43
# point 6), one model, precision and batch per row, with the memory model's prediction beside
# the peaks both measured. Reads the sourcing script's bin (the build's bin folder), python (the
# node's Python with torch and torchvision: the one the build was made against, so a node
# without network needs nothing more), work (a scratch folder) and log.
#
# Both sides train the same way: one device, a synthetic batch (deepool-train's `synthetic` for
# images; for GPT a token file of random ids, since deepool's synthetic data is images only, and
# random ids in the loop), SGD with lr 0.01 (deepool-train's default) and momentum 0.9 (what the
# memory model counts for sgd), the precision named in the row (tf32: fp32 with TF32 allowed; bf16:
# autocast with fp32 weights), ITERATIONS iterations of which the first WARMUP are not counted.

# gpu_node_compare_header: the table's two header lines.
gpu_node_compare_header() {
  echo "| model | precision | batch | deepool ms | PyTorch ms | PyTorch / deepool |" \
       "deepool rate | deepool peak GiB | PyTorch peak GiB | predicted GiB |"
  echo "|---|---|---|---|---|---|---|---|---|---|"
}

# gpu_node_tokens_file FILE VOCABULARY: 262,144 random little-endian uint16 ids below VOCABULARY
# (deepool's `tokens` layout), written with the standard library only.
gpu_node_tokens_file() {
  "$python" - "$1" "$2" <<'PY'
import array, random, sys
ids = array.array("H", (random.Random(0).randrange(int(sys.argv[2])) for _ in range(1 << 18)))
if sys.byteorder != "little":
    ids.byteswap()
with open(sys.argv[1], "wb") as f:
    f.write(ids.tobytes())
PY
}

# gpu_node_deepool_ms_peak WARMUP: deepool-train --json events on stdin; prints the median
# iteration ms after the warm-up and the largest peak_memory_bytes, or nothing.
gpu_node_deepool_ms_peak() {
  "$python" -c '
import json, statistics, sys
warmup = int(sys.argv[1])
events = [e for e in map(json.loads, filter(str.strip, sys.stdin)) if e.get("event") == "iteration"]
times = [e["iteration_ms"] for e in events if e["iteration"] >= warmup]
if times:
    print("%.2f %d" % (statistics.median(times), max(e.get("peak_memory_bytes", 0) for e in events)))
' "$1"
}

# gpu_node_compare_row DEVICE PLAN_DEVICE MODEL PRECISION BATCH ITERATIONS WARMUP [SEQ_LEN]
# Prints one Markdown row; returns 1 when a side failed (the row says which). DEVICE: cuda or
# cpu; PLAN_DEVICE: the preset `deepool plan` predicts memory with (empty: none). SEQ_LEN: GPT
# models' tokens per sample (their context when empty; the plan only at the context). Appends "model precision batch ms" to
# gpu_node_compare_rates for image models (the cores-per-GPU table reads them).
gpu_node_compare_row() {
  local device="$1" plan_device="$2" model="$3" precision="$4" batch="$5" iterations="$6"
  local warmup="$7" seq_len="${8:-}" data=() loop_flags=() gpt=0 out status=0
  local deepool_ms="failed" deepool_peak="" torch_ms="failed" torch_peak="" predicted=""
  if [[ $model == gpt* ]]; then
    gpt=1
    local vocabulary=50257 context=1024
    [[ $model == gpt_tiny ]] && vocabulary=256 context=64
    seq_len="${seq_len:-$context}"
    [[ -s "$work/tokens-$vocabulary.bin" ]] ||
      gpu_node_tokens_file "$work/tokens-$vocabulary.bin" "$vocabulary" >>"$log" 2>&1
    data=(--data "tokens:$work/tokens-$vocabulary.bin" --image-size "$seq_len")
    loop_flags=(--seq-len "$seq_len")
    # deepool plan plans a zoo model at its context only.
    [[ $seq_len == "$context" ]] || plan_device=""
  else
    data=(--num-classes 1000)
  fi
  if out="$("$bin/deepool-train" --model "$model" --device "$device" --ranks 1 \
        --global-batch "$batch" --iterations "$iterations" --precision "$precision" \
        --optimizer sgd --lr 0.01 --momentum 0.9 --json "${data[@]}" 2>>"$log" |
        gpu_node_deepool_ms_peak "$warmup")" && [[ -n "$out" ]]; then
    read -r deepool_ms deepool_peak <<<"$out"
  else
    status=1
  fi
  if out="$("$python" bench/runtime/pytorch_loop.py --model "$model" --device "$device" \
        --precision "$precision" --batch "$batch" --iterations "$iterations" --warmup "$warmup" \
        --optimizer sgd --lr 0.01 --momentum 0.9 "${loop_flags[@]}" 2>>"$log" |
        "$python" -c 'import json, sys; r = json.loads(sys.stdin.read())
print("%.2f %d" % (r["median_iteration_ms"], r["peak_memory_bytes"]))')"; then
    read -r torch_ms torch_peak <<<"$out"
  else
    status=1
  fi
  if [[ -n "$plan_device" ]]; then
    predicted="$("$bin/deepool" plan --model "$model" --gpus 1 --global-batch "$batch" \
      --precision "$precision" --device "$plan_device" --optimizer sgd 2>>"$log" |
      sed -n 's/.*(predicted peak, memory model): rank 0 \([0-9.]*\) GiB.*/\1/p')"
  fi
  "$python" - "$model" "$precision" "$batch" "$deepool_ms" "$torch_ms" "$gpt" "${seq_len:-0}" \
    "$deepool_peak" "$torch_peak" "${predicted:-(not planned)}" <<'PY'
import sys
model, precision, batch, ours, theirs, gpt, seq_len, our_peak, their_peak, predicted = sys.argv[1:]
def number(text):
    try:
        return float(text)
    except ValueError:
        return None
def gib(text):
    return "%.2f" % (int(text) / 2**30) if text else "failed"
o, t = number(ours), number(theirs)
ratio = "%.3f" % (t / o) if o and t else ""
rate = ""
if o:
    per_s = int(batch) * 1000 / o
    rate = ("%s tokens/s" % f"{per_s * int(seq_len):,.0f}" if gpt == "1"
            else "%s images/s" % f"{per_s:,.0f}")
print(f"| {model} | {precision} | {batch} | {ours} | {theirs} | {ratio} | {rate} | "
      f"{gib(our_peak)} | {gib(their_peak)} | {predicted} |")
PY
  if [[ $gpt -eq 0 ]]; then gpu_node_compare_rates+=("$model $precision $batch $deepool_ms"); fi
  return $status
}

# gpu_node_compare_table DEVICE PLAN_DEVICE ITERATIONS WARMUP ROW...: the header and a row for
# each ROW ("model precision batch [seq_len]"); returns 1 when any row failed.
gpu_node_compare_table() {
  local device="$1" plan_device="$2" iterations="$3" warmup="$4" row status=0
  local model precision batch seq_len
  shift 4
  gpu_node_compare_header
  for row in "$@"; do
    read -r model precision batch seq_len <<<"$row"
    gpu_node_compare_row "$device" "$plan_device" "$model" "$precision" "$batch" "$iterations"       "$warmup" "$seq_len" || status=1
  done
  return $status
}
