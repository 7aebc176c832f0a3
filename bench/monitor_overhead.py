"""What BoostMonitor costs a LeNet-5 step (issue 11; target: under 2%).

GRAPH_MODE on CPU, LeNet-5 (from ``bench/step_overhead.py``) on a batch of 32 1x32x32 images, in a
``BoostTrainOneStepWithLossScaleCell`` with a dynamic scale. One compiled cell serves both sides, so the
comparison has no instance-to-instance noise:

- ``bare``: ``cell(x, y)`` per step, nothing read;
- ``monitored``: ``monitor.record(cell(x, y), 32)`` per step, a ``BoostMonitor(interval, path)`` writing JSON
  Lines to a temporary file (printing off), so each block includes its interval reports and their reads.

Each round times a block of ``--steps`` steps (a multiple of the interval) of one side, then of the other; which
goes first alternates. Reported: the median over rounds of ``monitored / bare`` for that round, its interquartile
range, and, measured separately and more robust under load, the host time of ``record()`` alone per step (the
per-step part of the monitor: it keeps the returned tensors; the reads happen once per interval) over the
median bare step time.

Usage: python bench/monitor_overhead.py [--rounds N] [--steps S] [--interval K] [--quick]
Always exits 0: a benchmark reports, it does not fail.
"""
import argparse
import os
import statistics
import sys
import tempfile
import time

import numpy as np

os.environ.setdefault("GLOG_v", "3")

import mindspore as ms  # noqa: E402  pylint: disable=wrong-import-position
from mindspore import Tensor, nn  # noqa: E402

from step_overhead import LeNet5  # noqa: E402  (bench/ is the script's directory)

import boost_cells  # noqa: E402

BATCH = 32
TARGET = 1.02


def build_cell():
    """A warmed-up loss-scaled LeNet-5 train cell and its inputs."""
    ms.set_seed(1)
    net = LeNet5()
    loss = nn.WithLossCell(net, nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean"))
    optimizer = nn.Momentum(net.trainable_params(), 0.01, 0.9)
    cell = boost_cells.BoostTrainOneStepWithLossScaleCell(loss, optimizer,
                                                          boost_cells.DynamicLossScaleUpdate(2.0 ** 10, 2, 1000))
    cell.set_train()
    rng = np.random.default_rng(0)
    inputs = (Tensor(rng.standard_normal((BATCH, 1, 32, 32)).astype(np.float32)),
              Tensor(rng.integers(0, 10, BATCH).astype(np.int32)))
    for _ in range(10):
        cell(*inputs)
    return cell, inputs


def time_block(step, steps):
    start = time.perf_counter()
    for _ in range(steps):
        step()
    return time.perf_counter() - start


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--steps", type=int, default=100, help="steps per block, a multiple of --interval")
    parser.add_argument("--interval", type=int, default=50, help="BoostMonitor interval (default: 50)")
    parser.add_argument("--quick", action="store_true", help="3 rounds of 20 steps, interval 10 (a smoke run)")
    args = parser.parse_args(argv)
    if args.quick:
        args.rounds, args.steps, args.interval = 3, 20, 10
    if args.steps % args.interval:
        parser.error("--steps must be a multiple of --interval")
    ms.set_context(mode=ms.GRAPH_MODE)
    ms.set_device("CPU")
    cell, inputs = build_cell()
    with tempfile.TemporaryDirectory() as tmp:
        monitor = boost_cells.BoostMonitor(args.interval, os.path.join(tmp, "run.jsonl"), cell, print_fn=None)
        sides = {"bare": lambda: cell(*inputs), "monitored": lambda: monitor.record(cell(*inputs), BATCH)}
        ratios, bare_steps = [], []
        for round_index in range(args.rounds):
            order = ("bare", "monitored") if round_index % 2 == 0 else ("monitored", "bare")
            times = {side: time_block(sides[side], args.steps) for side in order}
            ratios.append(times["monitored"] / times["bare"])
            bare_steps.append(times["bare"] / args.steps)
        outputs = [cell(*inputs) for _ in range(args.interval)]
        start = time.perf_counter()
        for out in outputs[:-1]:
            monitor.record(out, BATCH)
        record_cost = (time.perf_counter() - start) / (len(outputs) - 1)
        start = time.perf_counter()
        monitor.record(outputs[-1], BATCH)
        report_cost = time.perf_counter() - start
        monitor.close()
    quartiles = statistics.quantiles(ratios, n=4)
    bare = statistics.median(bare_steps)
    median = statistics.median(ratios)
    print(f"LeNet-5, batch {BATCH}, GRAPH_MODE CPU, interval {args.interval}, {args.rounds} rounds of "
          f"{args.steps} steps")
    print(f"bare step (median)                      {bare * 1e6:10.0f} us")
    print(f"monitored / bare, median of rounds      {median:10.4f}   (IQR {quartiles[0]:.4f}-{quartiles[2]:.4f}, "
          f"target < {TARGET}: {'PASS' if median < TARGET else 'FAIL'})")
    print(f"record() per step, host                 {record_cost * 1e6:10.1f} us = {record_cost / bare:.4%} of a step")
    print(f"one interval report (reads + JSON line) {report_cost * 1e6:10.1f} us = "
          f"{report_cost / (args.interval * bare):.4%} of the interval's steps")
    return 0


if __name__ == "__main__":
    sys.exit(main())
