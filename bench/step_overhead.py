"""Fixed per-step overhead of the boost_cells train cells against the best MindSpore baseline.

GRAPH_MODE on CPU, three workloads (LeNet-5 on a batch of 32 1x32x32 images; a tiny Dense 16->32->10 MLP on a
batch of 8, whose step takes about a millisecond; bench/o1_speedup.py's truly launch-bound ResNet, width 4 with one
block a stage, on a batch of 32 1x8x8 images) and three pairs:

- ``O0``: ``BoostTrainOneStepCell(boost_config={"level": "O0"})`` vs ``nn.TrainOneStepCell``;
- ``O1 route``: ``BoostTrainOneStepCell`` with ``configs/O1.json`` (gradient freezing, payback, the cache on "auto"; its
  ``param_groups`` left out, so that the groups fit the network), fitted to a run long enough that nothing freezes
  while it is timed, so every step is the frozen levels' route at level 0 (its counting kernels, its ledger's clock,
  its host mirror), vs the O0 cell: what the route costs a step where no level pays (the MLP has too few layers for
  the file's freezing, so no route);
- ``loss scale``: ``BoostTrainOneStepWithLossScaleCell`` with ``DynamicLossScaleUpdate(2**10, 2, 1000)`` vs the
  best loss-scaled step MindSpore itself runs on CPU (``nn.TrainOneStepWithLossScaleCell`` does not): the
  documented ``mindspore.amp.DynamicLossScaler`` + ``value_and_grad`` + ``all_finite`` step, compiled either as
  an ``@ms.jit`` function or as a Cell, whichever is faster here (chosen by the same interleaved measurement).

Method. Every cell gets its own network and optimizer, built after the same ``ms.set_seed``, and is compiled and
warmed up before timing; each step is checked to update the weights. Identical cells differ by a few percent
from one compiled instance to the next in one process (the first graph compiled in a process runs up to ~10%
faster than later ones), so a throw-away graph is compiled first and each side of a pair is ``--instances``
separately compiled copies, built in A B B A order and used in rotation. Each round times a block of S steps of
one side and then a block of the other (which goes first alternates), S chosen so that a block takes ~40 ms; the
figure reported is the median over rounds of ``time_ours / time_baseline`` for that round (not a ratio of
medians), with its interquartile range; per-step times are the medians of block time / S.

Usage: python bench/step_overhead.py [--rounds N] [--quick] [--instances K] [--aa]
Always exits 0: a benchmark reports, it does not fail.
"""
import argparse
import gc
import json
import os
import statistics
import sys
import time

import numpy as np

os.environ.setdefault("GLOG_v", "3")  # keep MindSpore's warnings out of the table

import mindspore as ms  # noqa: E402  pylint: disable=wrong-import-position
import mindspore.amp as amp  # noqa: E402
from mindspore import Tensor, nn  # noqa: E402

import boost_cells  # noqa: E402
from msrun_launch import ROOT  # noqa: E402  (bench/ is the script's directory)

if ROOT not in sys.path:
    sys.path.insert(0, ROOT)
from examples.train import resnet  # noqa: E402  pylint: disable=wrong-import-position

SEED = 1
LOSS_SCALE = 2.0 ** 10
TARGETS = {"LeNet-5": 1.02, "MLP": 1.05, "ResNet-tiny": 1.02}
O1_CONFIG = os.path.join(ROOT, "configs", "O1.json")
UNFROZEN_RUN = boost_cells.Run(1000, 1000)  # its warm-up (a tenth of the run's updates) outlasts every timed step


# ----------------------------------------------------------------------------------------------- workloads

class LeNet5(nn.Cell):
    """LeNet-5: conv 1->6 5x5, relu, pool, conv 6->16 5x5, relu, pool, flatten, dense 400->120->84->10."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 6, 5, pad_mode="valid")
        self.conv2 = nn.Conv2d(6, 16, 5, pad_mode="valid")
        self.relu = nn.ReLU()
        self.pool = nn.MaxPool2d(kernel_size=2, stride=2)
        self.flatten = nn.Flatten()
        self.fc1 = nn.Dense(400, 120)
        self.fc2 = nn.Dense(120, 84)
        self.fc3 = nn.Dense(84, 10)

    def construct(self, x):
        x = self.pool(self.relu(self.conv1(x)))
        x = self.pool(self.relu(self.conv2(x)))
        x = self.flatten(x)
        x = self.relu(self.fc1(x))
        x = self.relu(self.fc2(x))
        return self.fc3(x)


class TinyMLP(nn.Cell):
    """Dense 16->32, relu, dense 32->10."""

    def __init__(self):
        super().__init__()
        self.fc1 = nn.Dense(16, 32)
        self.relu = nn.ReLU()
        self.fc2 = nn.Dense(32, 10)

    def construct(self, x):
        return self.fc2(self.relu(self.fc1(x)))


class Workload:
    """A network factory and one fixed batch, shared by every cell timed on it."""

    def __init__(self, name, net_cls, x_shape, batch):
        self.name = name
        self.net_cls = net_cls
        rng = np.random.default_rng(SEED)
        self.inputs = (Tensor(rng.standard_normal((batch,) + x_shape).astype(np.float32)),
                       Tensor(rng.integers(0, 10, (batch,)).astype(np.int32)))

    def make(self):
        """A fresh (network with loss, optimizer), identically initialised for every call."""
        ms.set_seed(SEED)
        net = self.net_cls()
        loss_fn = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")
        net_with_loss = nn.WithLossCell(net, loss_fn)
        optimizer = nn.Momentum(net.trainable_params(), learning_rate=0.01, momentum=0.9)
        return net_with_loss, optimizer


def tiny_resnet():
    """bench/o1_speedup.py's truly launch-bound network: examples/train.py's ResNet, width 4, one block a stage."""
    return resnet(width=4, blocks=1)


WORKLOADS = (Workload("LeNet-5", LeNet5, (1, 32, 32), 32), Workload("MLP", TinyMLP, (16,), 8),
             Workload("ResNet-tiny", tiny_resnet, (1, 8, 8), 32))


# ----------------------------------------------------------------------------------------------- candidates

class Candidate:
    """One compiled train step: ``step()`` runs a step on the workload's batch, ``sync(out)`` waits for it."""

    def __init__(self, label, call, inputs, optimizer, check=None):
        self.label = label
        self.call = call
        self.inputs = inputs
        self.optimizer = optimizer
        self.check = check  # extra per-output check (the loss-scaled cells: no overflow)
        self.scaler = None

    def step(self):
        return self.call(*self.inputs)

    @staticmethod
    def sync(out):
        (out[0] if isinstance(out, tuple) else out).asnumpy()

    def warm_up(self, extra_steps=20):
        """Compile, check that a step updates the weights and gives a finite loss, then run a few steps."""
        before = [p.asnumpy().copy() for p in self.optimizer.parameters]
        out = self.step()
        self.sync(out)
        if self.check is not None:
            self.check(out)
        after = [p.asnumpy() for p in self.optimizer.parameters]
        if not any(np.any(a != b) for a, b in zip(after, before)):
            raise RuntimeError(f"{self.label}: a step did not change any weight")
        loss = float((out[0] if isinstance(out, tuple) else out).asnumpy())
        if not np.isfinite(loss):
            raise RuntimeError(f"{self.label}: non-finite loss {loss}")
        for _ in range(extra_steps):
            out = self.step()
        self.sync(out)
        return loss


def ours_o0(workload):
    nwl, opt = workload.make()
    cell = boost_cells.BoostTrainOneStepCell(nwl, opt, boost_config={"level": "O0"})
    return Candidate("BoostTrainOneStepCell O0", cell, workload.inputs, opt)


def ours_o1_route(workload):
    """The O1 file's cell, fitted to ``UNFROZEN_RUN``: the frozen levels' route takes every step, at level 0 (None
    where the network has too few layers for the file's freezing to build a route)."""
    nwl, opt = workload.make()
    with open(O1_CONFIG, encoding="utf-8") as handle:
        config = json.load(handle)
    del config["grad_freeze"]["param_groups"]  # the level's default, fitted to the network's layers
    cell = boost_cells.BoostTrainOneStepCell(nwl, opt, boost_config=config)
    cell.fit_to_run(UNFROZEN_RUN)
    if cell.level_route is None or not cell.level_route.active:
        return None
    return Candidate("BoostTrainOneStepCell, configs/O1.json", cell, workload.inputs, opt)


def nn_train_one_step(workload):
    nwl, opt = workload.make()
    return Candidate("nn.TrainOneStepCell", nn.TrainOneStepCell(nwl, opt), workload.inputs, opt)


def _no_overflow(out):
    if bool(out[1].asnumpy()):
        raise RuntimeError("BoostTrainOneStepWithLossScaleCell reported an overflow")


def ours_loss_scale(workload):
    nwl, opt = workload.make()
    cell = boost_cells.BoostTrainOneStepWithLossScaleCell(
        nwl, opt, boost_cells.DynamicLossScaleUpdate(LOSS_SCALE, 2, 1000), boost_config={"level": "O0"})
    return Candidate("BoostTrainOneStepWithLossScaleCell", cell, workload.inputs, opt, check=_no_overflow)


def amp_jit_step(workload):
    """MindSpore's documented functional loss-scaled step, compiled with ``@ms.jit``."""
    nwl, opt = workload.make()
    loss_scaler = amp.DynamicLossScaler(scale_value=int(LOSS_SCALE), scale_factor=2, scale_window=1000)

    def forward(x, y):
        return loss_scaler.scale(nwl(x, y))

    grad_fn = ms.value_and_grad(forward, None, opt.parameters)

    @ms.jit
    def train_step(x, y):
        loss, grads = grad_fn(x, y)
        loss = loss_scaler.unscale(loss)
        grads = loss_scaler.unscale(grads)
        is_finite = amp.all_finite(grads)
        loss_scaler.adjust(is_finite)
        if is_finite:
            opt(grads)
        return loss

    cand = Candidate("amp.DynamicLossScaler step, @ms.jit", train_step, workload.inputs, opt)
    cand.scaler = loss_scaler
    return cand


class AmpLossScaleStep(nn.Cell):
    """The same functional loss-scaled step as ``amp_jit_step``, wrapped in a Cell."""

    def __init__(self, network_with_loss, optimizer, loss_scaler):
        super().__init__(auto_prefix=False)
        self.network = network_with_loss
        self.optimizer = optimizer
        self.loss_scaler = loss_scaler
        self.grad_fn = ms.value_and_grad(self.forward, None, optimizer.parameters)

    def forward(self, x, y):
        return self.loss_scaler.scale(self.network(x, y))

    def construct(self, x, y):
        loss, grads = self.grad_fn(x, y)
        loss = self.loss_scaler.unscale(loss)
        grads = self.loss_scaler.unscale(grads)
        is_finite = amp.all_finite(grads)
        self.loss_scaler.adjust(is_finite)
        if is_finite:
            self.optimizer(grads)
        return loss


def amp_cell_step(workload):
    nwl, opt = workload.make()
    loss_scaler = amp.DynamicLossScaler(scale_value=int(LOSS_SCALE), scale_factor=2, scale_window=1000)
    cand = Candidate("amp.DynamicLossScaler step, Cell", AmpLossScaleStep(nwl, opt, loss_scaler),
                     workload.inputs, opt)
    cand.scaler = loss_scaler
    return cand


def build_sides(workload, factory_a, factory_b, instances):
    """``instances`` compiled copies of each side, built in A B B A order so neither side is always built first."""
    side_a, side_b = [], []
    for i in range(instances):
        order = ((factory_a, side_a), (factory_b, side_b)) if i % 2 == 0 else \
            ((factory_b, side_b), (factory_a, side_a))
        for factory, side in order:
            cand = factory(workload)
            cand.warm_up()
            if cand.scaler is not None and int(cand.scaler.counter.asnumpy()) < 1:
                raise RuntimeError(f"{cand.label}: the loss scaler recorded no clean step")
            side.append(cand)
    return side_a, side_b


# ----------------------------------------------------------------------------------------------- timing

def time_block(cand, steps):
    start = time.perf_counter()
    out = None
    for _ in range(steps):
        out = cand.step()
    cand.sync(out)
    return time.perf_counter() - start


def steps_per_block(sides, block_s):
    """Steps per block so that the slower side's block takes about ``block_s``."""
    per_step = max(min(time_block(c, 10) / 10 for _ in range(2)) for side in sides for c in side[:1])
    return max(1, int(round(block_s / per_step)))


def interleave(side_a, side_b, rounds, steps):
    """Per-round block times of the two sides; instances rotate, and which side goes first alternates."""
    times_a, times_b = [], []
    gc.collect()
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        for r in range(rounds):
            a, b = side_a[r % len(side_a)], side_b[r % len(side_b)]
            if r % 2 == 0:
                ta = time_block(a, steps)
                tb = time_block(b, steps)
            else:
                tb = time_block(b, steps)
                ta = time_block(a, steps)
            times_a.append(ta)
            times_b.append(tb)
            if r % 10 == 9:
                gc.collect()
    finally:
        if gc_was_enabled:
            gc.enable()
    return times_a, times_b


def summarize(times_ours, times_base, steps):
    """Median of the per-round ratios (and its interquartile range); median per-step times in us."""
    ratios = sorted(o / b for o, b in zip(times_ours, times_base))
    return {"ours_us": statistics.median(times_ours) / steps * 1e6,
            "base_us": statistics.median(times_base) / steps * 1e6,
            "ratio": statistics.median(ratios),
            "q1": ratios[len(ratios) // 4], "q3": ratios[(3 * len(ratios)) // 4]}


def measure(side_a, side_b, rounds, block_s):
    steps = steps_per_block((side_a, side_b), block_s)
    return summarize(*interleave(side_a, side_b, rounds, steps), steps), steps


# ----------------------------------------------------------------------------------------------- main

def _load():
    try:
        return " ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "n/a"


def _sacrificial_graph():
    """Compile and run one throw-away graph: the first graph of a process runs faster than later ones."""
    workload = WORKLOADS[-1]
    cand = nn_train_one_step(workload)
    cand.warm_up(5)
    return cand


def route_pair(workload, rounds, block_s, instances, rows, target, log):
    """Time the O1 file's route at level 0 against the O0 cell; add the row, return the cells to keep alive."""
    ours, base = build_sides(workload, ours_o1_route, ours_o0, instances)
    stats, steps = measure(ours, base, rounds, block_s)
    if any(cand.call.level_route.schedule.frozen_for_good() for cand in ours):
        raise RuntimeError("the O1 route froze a level while it was timed")
    rows.append((workload.name, "O1 route", base[0].label, steps, stats, target))
    log(f"  {workload.name:8s} O1 route    done ({steps} steps/block)")
    return ours + base


def run(rounds, block_s, instances, aa=False, log=print):
    """Measure every workload and pair; returns the table rows."""
    keep_alive = [_sacrificial_graph()]
    rows = []
    for workload in WORKLOADS:
        target = TARGETS[workload.name]

        if aa:  # noise floor: the baseline against itself
            side_a, side_b = build_sides(workload, nn_train_one_step, nn_train_one_step, instances)
            stats, steps = measure(side_a, side_b, rounds, block_s)
            rows.append((workload.name, "A/A (nn vs nn)", "nn.TrainOneStepCell", steps, stats, None))
            keep_alive += side_a + side_b

        # Pair 1: O0 vs nn.TrainOneStepCell.
        ours, base = build_sides(workload, ours_o0, nn_train_one_step, instances)
        stats, steps = measure(ours, base, rounds, block_s)
        rows.append((workload.name, "O0", base[0].label, steps, stats, target))
        log(f"  {workload.name:8s} O0          done ({steps} steps/block)")
        keep_alive += ours + base

        # Pair 2: the O1 file's route at level 0 vs the O0 cell, where the network has a route.
        if ours_o1_route(workload) is None:
            log(f"  {workload.name:8s} O1 route    n/a: too few layers for configs/O1.json to freeze, so no route")
        else:
            keep_alive += route_pair(workload, rounds, block_s, instances, rows, target, log)

        # Pair 3: loss scale vs the faster of MindSpore's functional loss-scaled steps (@ms.jit or Cell).
        jit_side, cell_side = build_sides(workload, amp_jit_step, amp_cell_step, instances)
        sel, _ = measure(jit_side, cell_side, max(10, rounds // 3), block_s)
        base = jit_side if sel["ratio"] <= 1.0 else cell_side
        log(f"  {workload.name:8s} loss-scaled baseline: @ms.jit {sel['ours_us']:.0f} us/step, Cell "
            f"{sel['base_us']:.0f} us/step, median ratio jit/Cell {sel['ratio']:.3f} -> {base[0].label}")
        ours = []
        for _ in range(instances):
            cand = ours_loss_scale(workload)
            cand.warm_up()
            ours.append(cand)
        stats, steps = measure(ours, base, rounds, block_s)
        for cand in ours:
            _no_overflow(cand.step())
        rows.append((workload.name, "loss scale", base[0].label, steps, stats, target))
        log(f"  {workload.name:8s} loss scale  done ({steps} steps/block)")
        keep_alive += jit_side + cell_side + ours
    return rows


def format_table(rows):
    header = (f"{'workload':9s} {'pair':15s} {'ours us/step':>12s} {'base us/step':>12s} {'median ratio':>12s} "
              f"{'IQR of ratios':>14s} {'target':>6s}  result  baseline")
    lines = [header, "-" * len(header)]
    for name, pair, label, _, s, target in rows:
        if target is None:
            verdict, target_s = "-", "-"
        else:
            verdict, target_s = ("PASS" if s["ratio"] <= target else "MISS"), f"{target:.2f}"
        lines.append(f"{name:9s} {pair:15s} {s['ours_us']:12.1f} {s['base_us']:12.1f} {s['ratio']:12.3f} "
                     f"{s['q1']:7.3f}-{s['q3']:.3f} {target_s:>6s}  {verdict:6s}  {label}")
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    parser.add_argument("--rounds", type=int, default=None,
                        help="interleaved rounds per pair (default 80; 16 with --quick)")
    parser.add_argument("--quick", action="store_true", help="fewer rounds, shorter blocks, one instance per side")
    parser.add_argument("--instances", type=int, default=None,
                        help="compiled copies per side, used in rotation (default 2; 1 with --quick)")
    parser.add_argument("--aa", action="store_true", help="also time the baseline against itself (noise floor)")
    args = parser.parse_args(argv)
    rounds = max(2, args.rounds if args.rounds is not None else (16 if args.quick else 80))
    instances = max(1, args.instances if args.instances is not None else (1 if args.quick else 2))
    block_s = 0.015 if args.quick else 0.04
    ms.set_context(mode=ms.GRAPH_MODE, device_target="CPU")

    print(f"step overhead: MindSpore {ms.__version__}, GRAPH_MODE, CPU, {os.cpu_count()} cores; {rounds} "
          f"interleaved rounds per pair, blocks of ~{block_s * 1e3:.0f} ms, {instances} instance(s) per side; "
          f"load average at start {_load()}", flush=True)
    start = time.perf_counter()
    rows = run(rounds, block_s, instances, aa=args.aa, log=lambda msg: print(msg, flush=True))
    print()
    print(format_table(rows))
    print(f"\n{time.perf_counter() - start:.0f} s; load average at end {_load()} (other processes on the machine "
          "scatter the times, the loss-scaled steps' control flow most of all)")
    return 0


if __name__ == "__main__":
    try:
        main()
    except Exception as exc:  # pylint: disable=broad-except
        print(f"step_overhead: benchmark failed: {type(exc).__name__}: {exc}", file=sys.stderr)
    sys.exit(0)
