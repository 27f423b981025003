#!/usr/bin/env python3
"""DeepPool's parallelisation search beside deepool's planner, on the same models and device counts.

Runs DeepPool's own search (CostSim.searchBestSplitsV3 in parallelizationPlanner.py, as its
examples/*.py main() functions call it, on its recorded A100 profiles) from a checkout the user
gives with --deeppool, and deepool's search (PlanBurstParallel, via build/bin/deepool-bench-planner)
for vgg16, resnet50, wide_resnet101_2 and inception_v3 at B = 32, and prints a Markdown table of
CPU times and their ratio. Nothing of DeepPool is copied here: its files are imported from
--deeppool, unchanged.

What is patched, and why (DeepPool's search itself needs no GPU):
  - the modules DeepPool imports but the search does not use (jsonpickle, graphviz, pyprof,
    matplotlib) are stand-ins when they are not installed: any attribute is a no-op;
  - the search prints a line per layer and per branch decision: its stdout goes to /dev/null
    while it runs (its own "search took" timing includes the prints to a terminal);
  - each search runs in its own Python process (this script with --run-one), so that one
    search's state (CostSim keeps tables on its layers) never carries over, and a search that
    runs too long is stopped (--timeout) and reported as such.
Layers DeepPool's profile file lacks cost it 1 us (benchGpuTime's fallback; queryFwBwTime 0):
the search still visits them. resnet50 uses examples/resnet.py with the resnet profile files that
file's main() loads (recorded for resnet34, so many resnet50 layers are missing there).

  .venv/bin/python bench/planner/deeppool_search_compare.py --deeppool ~/src/DeepPool \
      [--gpus 8 16] [--global-batch 32] [--limit 2.0] [--repeats 3] [--timeout 600] \
      [--granularity layers|mixed|blocks]
"""
import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import time
import types

# Per model: DeepPool's example module, its builder, input shape and profile files (as the
# example's main() loads them: the first file is loaded last and wins).
MODELS = {
    "vgg16": ("examples.vgg", lambda m: m.vgg16(pretrained=False), (3, 224, 224),
              ["profile/A100_vgg.prof"]),
    "resnet50": ("examples.resnet", lambda m: m.resnet50(), (3, 224, 224),
                 ["resnetLayerGpuProfileA100V2.txt", "resnetLayerGpuProfileA100.txt"]),
    "wide_resnet101_2": ("examples.wrn", lambda m: m.wide_resnet101_2(), (3, 224, 224),
                         ["profile/A100_wrn.prof"]),
    "inception_v3": ("examples.inception", lambda m: m.Inception3(aux_logits=False), (3, 299, 299),
                     ["profile/A100_inception.prof"]),
}
# The network bandwidth DeepPool's examples plan with (bytes per us: 2.66E5 is 2,128 Gbps).
DEEPPOOL_NET_BW = 2.66E5


class _NoOp(types.ModuleType):
    """A stand-in module: every attribute is a callable that accepts anything and returns itself."""

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return self

    def __call__(self, *args, **kwargs):
        return self


def _stand_in_missing_modules():
    for name in ["jsonpickle", "graphviz", "pyprof", "matplotlib", "matplotlib.pyplot"]:
        try:
            __import__(name)
        except ImportError:
            sys.modules[name] = _NoOp(name)


def run_one(deeppool, model, gpus, batch, limit):
    """One DeepPool search in this process; prints a JSON line with its CPU and wall seconds."""
    _stand_in_missing_modules()
    deeppool = os.path.abspath(deeppool)
    sys.path.insert(0, deeppool)
    os.chdir(deeppool)  # its examples open profile files by relative path
    module_name, build, input_shape, profiles = MODELS[model]
    import importlib
    module = importlib.import_module(module_name)
    from parallelizationPlanner import CostSim, GpuProfiler
    with open(os.devnull, "w") as devnull, contextlib.redirect_stdout(devnull):
        profiler = GpuProfiler("cuda")  # only a name: the search never runs a kernel
        cost_sim = CostSim(profiler, netBw=DEEPPOOL_NET_BW, verbose=False,
                           gpuProfileLoc=profiles[0],
                           gpuProfileLocSub=profiles[1] if len(profiles) > 1 else None)
        module.cs = cost_sim  # the examples' layers register with their module's global cs
        build(module)
        cost_sim.printAllLayers(slient=True)
        cost_sim.computeInputDimensions(input_shape)
        cpu_start, wall_start = time.process_time(), time.perf_counter()
        _, iteration_ms, gpu_ms, most_gpus = cost_sim.searchBestSplitsV3(
            gpus, batch, amplificationLimit=limit)
        cpu_s, wall_s = time.process_time() - cpu_start, time.perf_counter() - wall_start
    print(json.dumps({"cpu_s": cpu_s, "wall_s": wall_s, "iteration_ms": iteration_ms,
                      "gpu_ms": gpu_ms, "most_gpus": most_gpus, "layers": len(cost_sim.layers)}))


def deeppool_search(args, model, gpus):
    """Median CPU seconds of --repeats DeepPool searches (one process each), or None on timeout."""
    runs = []
    for _ in range(args.repeats):
        command = [sys.executable, os.path.abspath(__file__), "--run-one", "--deeppool",
                   args.deeppool, "--model", model, "--gpus", str(gpus), "--global-batch",
                   str(args.global_batch), "--limit", str(args.limit)]
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=args.timeout,
                                  check=True)
        except subprocess.TimeoutExpired:
            return None
        except subprocess.CalledProcessError as error:
            sys.exit("DeepPool's search failed for %s G=%d:\n%s" % (model, gpus, error.stderr))
        runs.append(json.loads(done.stdout.strip().splitlines()[-1]))
    return {"cpu_s": statistics.median(r["cpu_s"] for r in runs), "first": runs[0]}


def deepool_search(args, model, gpus):
    """deepool's first-call and median CPU ms from deepool-bench-planner's table row."""
    command = [args.deepool_bench, "--model", model, "--gpus", str(gpus), "--global-batch",
               str(args.global_batch), "--limit", str(args.limit), "--repeats", "11",
               "--granularity", args.granularity]
    row = subprocess.run(command, capture_output=True, text=True, check=True).stdout
    cells = [c.strip() for c in row.strip().splitlines()[-1].strip("|").split("|")]
    # model | layers | G | B | limit | first CPU | first wall | CPU median | wall median | ...
    return {"layers": int(cells[1]), "first_ms": float(cells[5]), "median_ms": float(cells[7]),
            "iteration_ms": float(cells[9])}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--deeppool", required=True, help="a checkout of DeepPool")
    parser.add_argument("--deepool-bench", default=os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "..", "..", "build", "bin",
        "deepool-bench-planner"))
    parser.add_argument("--models", nargs="+", default=list(MODELS))
    parser.add_argument("--gpus", nargs="+", type=int, default=[8, 16])
    parser.add_argument("--global-batch", type=int, default=32)
    parser.add_argument("--limit", type=float, default=2.0)
    parser.add_argument("--repeats", type=int, default=3, help="DeepPool searches per case")
    parser.add_argument("--granularity", default="mixed", choices=["layers", "mixed", "blocks"],
                        help="deepool's search granularity (PlanOptions::granularity)")
    parser.add_argument("--timeout", type=float, default=600, help="seconds per DeepPool search")
    parser.add_argument("--run-one", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--model", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.run_one:
        run_one(args.deeppool, args.model, args.gpus[0], args.global_batch, args.limit)
        return
    print("| model | G | B | limit | DeepPool layers | DeepPool search CPU ms (median of %d) | "
          "deepool layers | deepool first call CPU ms | deepool CPU ms (median of 11) | "
          "DeepPool / deepool first call | DeepPool iteration ms | deepool iteration ms |"
          % args.repeats)
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for model in args.models:
        for gpus in args.gpus:
            theirs = deeppool_search(args, model, gpus)
            ours = deepool_search(args, model, gpus)
            if theirs is None:
                their_ms, ratio, layers, their_iteration = (
                    "over %d s" % args.timeout, "-", "-", "-")
            else:
                their_ms = "%.1f" % (theirs["cpu_s"] * 1e3)
                ratio = "%.0fx" % (theirs["cpu_s"] * 1e3 / ours["first_ms"])
                layers = str(theirs["first"]["layers"])
                their_iteration = "%.2f" % theirs["first"]["iteration_ms"]
            print("| %s | %d | %d | %s | %s | %s | %d | %s | %s | %s | %s | %.2f |" % (
                model, gpus, args.global_batch, args.limit or "none", layers, their_ms,
                ours["layers"], ours["first_ms"], ours["median_ms"], ratio, their_iteration,
                ours["iteration_ms"]))
            sys.stdout.flush()


if __name__ == "__main__":
    main()
