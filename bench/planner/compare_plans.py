#!/usr/bin/env python3
"""Compares the predicted iteration times of two bench/planner/dump_plans.sh directories.

A change to the search that is meant to keep plans passes when `diff -r BEFORE AFTER` is empty;
one that may change them (another granularity, another set of solves) is judged by how much
slower or faster the plans it changes are, by the cost model's own prediction. Prints how many
files differ, how many plans (and speed-up curve points) got slower or faster and by how much,
and per model the mean, worst and best ratio of AFTER's iteration time to BEFORE's.

  bench/planner/compare_plans.py BEFORE AFTER [--worst 8]

A file whose text is not JSON in either directory (a refusal, kept in place of the plan) counts
as differing only when the texts differ; it is listed, not compared.
"""
import argparse
import json
import os
import statistics
import sys


def iteration_times(text):
    """The plan's iteration time, or each curve point's, from a file's JSON."""
    data = json.loads(text)
    if "points" in data:
        return [point["iteration_ms"] for point in data["points"]]
    return [data["totals"]["iteration_ms"]]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("before")
    parser.add_argument("after")
    parser.add_argument("--worst", type=int, default=8, help="how many of the slowest to list")
    args = parser.parse_args()

    names = sorted(os.listdir(args.before))
    missing = [name for name in names if not os.path.exists(os.path.join(args.after, name))]
    if missing:
        sys.exit("%d files of %s are not in %s, e.g. %s" % (len(missing), args.before, args.after,
                                                           missing[0]))
    differing, unreadable = 0, []
    ratios = []  # (after / before, file) for every point of a differing file
    by_model = {}  # model -> ratios of every plan file (not curves), differing or not
    for name in names:
        with open(os.path.join(args.before, name)) as f:
            before = f.read()
        with open(os.path.join(args.after, name)) as f:
            after = f.read()
        try:
            pairs = list(zip(iteration_times(before), iteration_times(after)))
        except (ValueError, KeyError):
            if before != after:
                differing += 1
                unreadable.append(name)
            continue
        if "-curve" not in name:
            model = name.split("-G")[0]
            by_model.setdefault(model, []).extend(b / a for a, b in pairs)
        if before == after:
            continue
        differing += 1
        ratios.extend((b / a, name) for a, b in pairs)

    slower = sorted((r for r in ratios if r[0] > 1 + 1e-12), reverse=True)
    faster = sorted(r for r in ratios if r[0] < 1 - 1e-12)
    print("files: %d, differing: %d" % (len(names), differing))
    print("points in differing files: %d, slower: %d, faster: %d" %
          (len(ratios), len(slower), len(faster)))
    for label, points in (("slowest", slower[:args.worst]), ("fastest", faster[:args.worst])):
        if points:
            print("%s: %s" % (label, ", ".join("%+.3f %% %s" % ((r - 1) * 100, name)
                                               for r, name in points)))
    for name in unreadable:
        print("differing, not a plan: %s" % name)
    print("| model | plans | mean | worst | best |")
    print("|---|---|---|---|---|")
    for model, model_ratios in sorted(by_model.items()):
        print("| %s | %d | %+.3f %% | %+.3f %% | %+.3f %% |" % (
            model, len(model_ratios), (statistics.mean(model_ratios) - 1) * 100,
            (max(model_ratios) - 1) * 100, (min(model_ratios) - 1) * 100))


if __name__ == "__main__":
    main()
