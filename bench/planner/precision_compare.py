#!/usr/bin/env python3
"""The planner's choices at several precisions (docs/benchmarks.md, "Precision").

Runs `deepool plan --json` for each zoo model on an analytical device at each precision and
prints a Markdown table: predicted single-device, plan and data-parallel iteration times, and
how many layers the plan at each precision puts on fewer, the same or more devices than the plan
at the first precision. Everything is the cost model's prediction; nothing is measured.

  bench/planner/precision_compare.py [--deepool build/bin/deepool] [--device h100] [--gpus 8]
      [--global-batch 64] [--amplification-limit 2.0] [--precisions tf32,bf16]
      [--models vgg16,resnet50,...]
"""
import argparse
import json
import subprocess
import sys


def plan(args, model, precision):
    command = [args.deepool, "plan", "--model", model, "--global-batch", str(args.global_batch),
               "--gpus", str(args.gpus), "--amplification-limit", str(args.amplification_limit),
               "--device", args.device, "--precision", precision, "--json"]
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"{' '.join(command)}: exit {done.returncode}: {done.stderr.strip()}")
    return json.loads(done.stdout)


def devices_by_layer(plan_doc):
    return {layer["layer"]: len(layer["devices"]) for layer in plan_doc["layers"]}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--deepool", default="build/bin/deepool")
    parser.add_argument("--device", default="h100")
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--global-batch", type=int, default=64)
    parser.add_argument("--amplification-limit", type=float, default=2.0)
    parser.add_argument("--precisions", default="tf32,bf16")
    parser.add_argument("--models", default="vgg16,resnet50,wide_resnet101_2,inception_v3")
    args = parser.parse_args()
    precisions = args.precisions.split(",")

    print(f"{args.device}, G = {args.gpus}, B = {args.global_batch}, amplification limit "
          f"{args.amplification_limit}; layer counts against {precisions[0]}\n")
    print("| model | precision | single device ms | plan ms | DP ms | speed-up vs DP | "
          "amplification | devices used | layers on fewer / same / more devices |")
    print("|---|---|---|---|---|---|---|---|---|")
    for model in args.models.split(","):
        reference = None
        for precision in precisions:
            doc = plan(args, model, precision)
            counts = devices_by_layer(doc)
            if reference is None:
                reference = counts
                moved = "-"
            else:
                fewer = sum(1 for name, n in counts.items() if n < reference[name])
                more = sum(1 for name, n in counts.items() if n > reference[name])
                moved = f"{fewer} / {len(counts) - fewer - more} / {more}"
            totals, dp = doc["totals"], doc["data_parallel"]
            print(f"| {model} | {precision} | {doc['single_device_ms']:.2f} | "
                  f"{totals['iteration_ms']:.2f} | {dp['iteration_ms']:.2f} | "
                  f"{dp['iteration_ms'] / totals['iteration_ms']:.2f}x | "
                  f"{totals['amplification']:.2f} | {totals['devices_used']} | {moved} |")


if __name__ == "__main__":
    main()
