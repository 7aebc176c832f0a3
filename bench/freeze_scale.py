"""Does the automatic freezing schedule decide at the same point of training whatever the dataset's size and the
number of workers? The shipped configs/O1.json through ``boost_cells.Model`` at 1x and 4x the training data,
stand-alone and under ``msrun`` with 2 workers, against O0 on the same data.

    python bench/freeze_scale.py [--epochs 12] [--workload launch|compute] [--skip-distributed]

The workloads, arms and measures are ``bench/o1_speedup.py``'s (its ``train_arm``); "4x the data" is the training
split and three copies of it shifted by one pixel (right, down, and both; zeros shifted in), so every sample is a
distinct input and an epoch has 4x the updates. The held-out split is unchanged. Under msrun the O1 arm is the same
config, data-parallel over 2 workers (each rank trains on its shard, so an epoch has half the updates per rank).

Printed per run: the update after which each freezing level was first reached, as a share of the run's updates,
the decision interval as a share, and the held-out accuracy against O0's. The schedule is scale-free when each level
freezes at the same share (within one decision interval) at both sizes and both worker counts.
"""
import argparse
import json
import os
import sys

import numpy as np
from msrun_launch import ROOT, join_data_parallel, run_reporting_part

import mindspore as ms
import o1_speedup as speedup


with open(os.path.join(ROOT, "configs", "O1.json"), encoding="utf-8") as _handle:
    SCHEDULE = json.load(_handle)["grad_freeze"]


def shifted(images, right, down):
    """``images`` (N, 1, H, W) shifted ``right`` and ``down`` pixels, zeros shifted in."""
    out = np.zeros_like(images)
    height, width = images.shape[2:]
    out[:, :, down:, right:] = images[:, :, :height - down, :width - right]
    return out


def scaled_data(workload, factor):
    """The workload's split with the training part ``factor`` (1 or 4) times as large."""
    x_train, x_test, y_train, y_test = speedup.workload_data(workload)
    if factor == 1:
        return x_train, x_test, y_train, y_test
    shifts = [(0, 0), (1, 0), (0, 1), (1, 1)][:factor]
    return (np.concatenate([shifted(x_train, right, down) for right, down in shifts]), x_test,
            np.concatenate([y_train] * len(shifts)), y_test)


def run(workload, epochs, rank=0, rank_count=1):
    """O0 and O1 at 1x and 4x the data; returns ``{factor: {arm: measures}}``."""
    results = {}
    for factor in (1, 4):
        data = scaled_data(workload, factor)
        results[factor] = {arm: speedup.train_arm(arm, workload, 0, epochs, data, rank, rank_count)
                           for arm in ("O0", "O1")}
    return results


def report(results, workers):
    """Markdown rows: per data size, where each level froze and the accuracies."""
    rows = []
    for factor, arms in results.items():
        o1 = arms["O1"]
        steps = o1["steps"]
        levels = ", ".join(f"level {level} after update {update} ({update / steps:.1%})"
                           for level, update in sorted(o1["first_update_at_level"].items(), key=lambda i: int(i[0])))
        rows.append(f"| {workers} | {factor}x | {steps} | {max(1, round(SCHEDULE['auto_interval_share'] * steps))} | "
                    f"{levels or 'none'} | "
                    f"{100 * arms['O0']['accuracy']:.2f} | {100 * o1['accuracy']:.2f} | "
                    f"{100 * (o1['accuracy'] - arms['O0']['accuracy']):+.2f} | "
                    f"{arms['O0']['train'] / o1['train']:.2f}x |")
    return rows


HEADER = ["| workers | data | updates per rank | decision interval (updates) | freezing | O0 accuracy % | "
          "O1 accuracy % | O1 - O0 (points) | O1/O0 end-to-end |", "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]


def worker(args):
    """The msrun worker: O0 and O1 at both data sizes, data-parallel; rank 0 prints the rows."""
    rank, rank_count = join_data_parallel()
    results = run(args.workload, args.epochs, rank, rank_count)
    if rank == 0:
        for row in report(results, rank_count):
            print("bench: " + row, flush=True)
        print("bench: json " + json.dumps(results), flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    parser.add_argument("--epochs", type=int, default=12, help="epochs per run (default: 12)")
    parser.add_argument("--workload", choices=("launch", "compute"), default="launch",
                        help="bench/o1_speedup.py's workload (default: launch, the quicker)")
    parser.add_argument("--skip-distributed", action="store_true", help="only the stand-alone runs")
    parser.add_argument("--as-msrun-worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    ms.set_context(mode=ms.GRAPH_MODE)
    ms.set_device("CPU")
    if args.as_msrun_worker:
        worker(args)
        return 0
    print(f"bench/freeze_scale.py: configs/O1.json vs O0, {args.workload}-bound workload, {args.epochs} epochs; "
          f"the shipped schedule ({SCHEDULE['param_groups']} groups) decides every "
          f"{SCHEDULE['auto_interval_share']:.0%} of the run's updates from {SCHEDULE['auto_warmup_share']:.0%} on",
          flush=True)
    results = run(args.workload, args.epochs)
    print("\n".join(HEADER + report(results, 1)), flush=True)
    print("json " + json.dumps(results), flush=True)
    if args.skip_distributed:
        return 0
    return run_reporting_part(__file__, [f"--epochs={args.epochs}", f"--workload={args.workload}"], "scale",
                              timeout=3 * 3600)


if __name__ == "__main__":
    sys.exit(main())
