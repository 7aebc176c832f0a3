"""O1 over O0 and O2 over plain data-parallel: images per second and held-out accuracy, interleaved in one run.

    python bench/o1_speedup.py [--quick] [--rounds 3] [--epochs 12] [--skip-distributed | --skip-standalone]

Network: examples/train.py's small ResNet with BatchNorm at width 8 (stem, three stages of two basic blocks at
8/16/32 channels, pooled dense head: 9 stages, 15 BatchNorms) on scikit-learn's 8x8 digits (upsampled to 32x32
they cost ~50x more per step on this CPU's convolution kernels, too slow for a quick run), batch 32 per rank,
Momentum 0.9 with a per-epoch cosine learning rate, GRAPH_MODE. The split is examples/train.py's (80/20, fixed
seed). Each round trains every arm from the same initial weights and data order (round r uses seed r), arms
alternating who goes first; the table gives the median over rounds of the per-round throughput ratio and the
mean held-out accuracy.

- O0: ``build_train_network`` with level O0 (stand-alone), or O0 data-parallel (2 workers: gradient all-reduce).
- O1: the level's network and optimizer transforms through ``AutoBoost`` (LessBN with the feature-normalised
  head, gradient centralization), and freezing front stages for good on a progressive plan: after 30%, 50% and
  70% of the epochs the first 3, 5 and 7 stages stop training, switch to inference mode, and their outputs over
  the training set are computed once (``PrefixCache``, Egeria); the suffix then trains on the cached outputs,
  through its own ``build_train_network`` cell and a Momentum over its parameters (gradient centralization,
  moments carried over). O2 adds AdaSum across the 2 workers (``common.device_number`` 1). The plan plays the
  role of gradient freezing's progressive ``freeze_type`` 2 at stage granularity, so that whole stages can be
  cached; the in-graph interval schedule of ``configs/O1.json`` is not used (it buys ~1.05x here, DESIGN 7).

Images per second count every training image of every rank over the whole training loop, compiles of the
per-phase graphs and cache fills included (``end-to-end``); ``steady`` excludes each cell's first (compiling)
step and the cache fills. The time split (forward+backward+update per step, cache fill, host) shows where the
time goes. The distributed part relaunches this script under ``msrun --worker_num=2``; rank 0 reports.
"""
import argparse
import json
import sys
import time

import numpy as np
from msrun_launch import ROOT, relaunch

if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

import mindspore as ms  # noqa: E402  pylint: disable=wrong-import-position
from mindspore import Tensor, nn, ops  # noqa: E402  pylint: disable=wrong-import-position

from boost_cells import AutoBoost, build_train_network  # noqa: E402  pylint: disable=wrong-import-position
from boost_cells.transforms import (  # noqa: E402  pylint: disable=wrong-import-position
    OptimizerProcess, PrefixCache, split_stages)
from examples.train import (  # noqa: E402  pylint: disable=wrong-import-position
    cosine_lr, global_batches, load_data, resnet)

# (fraction of the epochs done, stages frozen for good from then on); the network has 9 stages.
FREEZE_PLAN = ((0.3, 3), (0.5, 5), (0.7, 7))
LR, MOMENTUM = 0.05, 0.9


def boost_config(arm):
    """The boost config of an arm: O0, or O1/O2's transforms (freezing for good is the plan above)."""
    if arm == "O0":
        return {"level": "O0"}
    config = {"boost": {"mode": "manual", "less_bn": True, "adasum": arm == "O2"},
              "less_bn": {"fn_flag": True, "gc_flag": True}}
    if arm == "O2":
        config["common"] = {"device_number": 1}
    return config


def frozen_stages(epoch, epochs, arm):
    """Stages frozen for good during ``epoch`` (1-based) under FREEZE_PLAN; 0 for O0."""
    if arm == "O0":
        return 0
    done = (epoch - 1) / epochs
    return max([count for fraction, count in FREEZE_PLAN if done >= fraction], default=0)


class Trainer:
    """One arm's training state: the network, the current train cell and, once stages are frozen, the cache."""

    def __init__(self, arm, seed, x_train):
        ms.set_seed(seed)
        self.arm, self.x_train = arm, x_train
        self.net = resnet(width=8)
        self.loss = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")
        self.frozen, self.cache, self.fill_seconds, self.optimizer = 0, None, 0.0, None
        self._build(self.net)

    def _build(self, trainable):
        """A new Momentum over ``trainable``'s parameters, carrying the old one's moments, and its train cell.

        The whole network goes through AutoBoost (LessBN with the FN head, gradient centralization); a suffix of
        it is already transformed, so only its new optimizer gets gradient centralization."""
        config = boost_config(self.arm)
        optimizer = nn.Momentum(trainable.trainable_params(), LR, MOMENTUM)
        if self.optimizer is None:
            trainable, optimizer = AutoBoost("O0", config).network_auto_process_train(trainable, optimizer)
        elif config.get("less_bn", {}).get("gc_flag"):
            process = OptimizerProcess(optimizer)
            process.add_grad_centralization(trainable)
            optimizer = process.generate_new_optimizer()
        if self.optimizer is not None:
            old = {moment.name: moment for moment in self.optimizer.moments}
            for moment in optimizer.moments:
                moment.set_data(old[moment.name].value())
        self.optimizer = optimizer
        self.cell = build_train_network(nn.WithLossCell(trainable, self.loss), optimizer, config)
        self.cell.set_train()
        self.compiled = False

    def start_epoch(self, epoch, epochs):
        """Freeze more stages if the plan says so (refilling the cache), and set this epoch's learning rate."""
        frozen = frozen_stages(epoch, epochs, self.arm)
        if frozen > self.frozen:
            prefix, suffix = split_stages(self.net, frozen)
            start = time.perf_counter()
            self.cache = PrefixCache(prefix, self.x_train, batch_size=len(self.x_train))
            self.fill_seconds += time.perf_counter() - start
            self.frozen = frozen
            self._build(suffix)
        ops.assign(self.optimizer.learning_rate, Tensor(np.float32(cosine_lr(LR, epoch, epochs))))

    def step(self, rows, labels):
        """One training step on sample indices ``rows``; returns (seconds, whether it compiled)."""
        inputs = self.cache(rows) if self.cache is not None else Tensor(self.x_train[rows])
        start = time.perf_counter()
        out = self.cell(inputs, Tensor(labels))
        (out[0] if isinstance(out, tuple) else out).asnumpy()
        compiled, self.compiled = not self.compiled, True
        return time.perf_counter() - start, compiled

    def accuracy(self, images, labels):
        self.net.set_train(False)
        logits = self.net(Tensor(images)).asnumpy()
        return float((logits.argmax(axis=1) == labels).mean())


def train_arm(arm, seed, epochs, data, rank=0, rank_count=1, batch_size=32):
    """Train one arm; returns its measures (images/s end-to-end and steady, accuracy, time split in seconds)."""
    x_train, x_test, y_train, y_test = data
    trainer = Trainer(arm, seed, x_train)
    rng = np.random.default_rng(seed)
    step_seconds = compile_seconds = 0.0
    images = 0
    start = time.perf_counter()
    for epoch in range(1, epochs + 1):
        trainer.start_epoch(epoch, epochs)
        for batch in global_batches(rng, len(x_train), batch_size * rank_count):
            rows = batch[rank * batch_size:(rank + 1) * batch_size]
            seconds, compiled = trainer.step(rows, y_train[rows])
            if compiled:
                compile_seconds += seconds
            else:
                step_seconds += seconds
                images += len(batch)
    total = time.perf_counter() - start
    all_images = epochs * (len(x_train) // (batch_size * rank_count)) * batch_size * rank_count
    return {"arm": arm, "end_to_end": all_images / total, "steady": images / step_seconds,
            "accuracy": trainer.accuracy(x_test, y_test), "steps": step_seconds, "compiles": compile_seconds,
            "cache_fill": trainer.fill_seconds, "host": total - step_seconds - compile_seconds - trainer.fill_seconds,
            "total": total}


def compare(base, boosted, rounds, epochs, rank=0, rank_count=1):
    """Interleaved rounds of ``base`` and ``boosted``; returns the per-round results."""
    data = load_data()
    results = []
    for round_index in range(rounds):
        arms = (base, boosted) if round_index % 2 == 0 else (boosted, base)
        outcome = {}
        for arm in arms:
            outcome[arm] = train_arm(arm, round_index, epochs, data, rank, rank_count)
            if rank == 0:
                print(f"round {round_index} {arm}: " + ", ".join(f"{key} {value:.4g}" for key, value in
                                                                 outcome[arm].items() if key != "arm"), flush=True)
        results.append(outcome)
    return results


def summarise(results, base, boosted, title):
    """Markdown lines: per-arm medians and means, and the median per-round ratios."""
    def median(arm, key):
        return float(np.median([r[arm][key] for r in results]))

    lines = [f"{title}: {len(results)} interleaved round(s)", "",
             f"| measure | {base} | {boosted} | {boosted} / {base} |", "| --- | --- | --- | --- |"]
    for key, label in (("end_to_end", "images/s end-to-end"), ("steady", "images/s steady")):
        ratio = float(np.median([r[boosted][key] / r[base][key] for r in results]))
        lines.append(f"| {label} (median) | {median(base, key):.0f} | {median(boosted, key):.0f} | {ratio:.3f} |")
    accuracy = {arm: 100 * float(np.mean([r[arm]["accuracy"] for r in results])) for arm in (base, boosted)}
    lines.append(f"| held-out accuracy % (mean) | {accuracy[base]:.2f} | {accuracy[boosted]:.2f} | "
                 f"{accuracy[boosted] - accuracy[base]:+.2f} points |")
    for key in ("steps", "compiles", "cache_fill", "host", "total"):
        lines.append(f"| seconds: {key.replace('_', ' ')} (median) | {median(base, key):.2f} | "
                     f"{median(boosted, key):.2f} | |")
    return lines


def launch(args):
    """Run the distributed part under msrun with 2 workers; returns (exit code, rank 0's report lines)."""
    code, lines = relaunch(__file__, [f"--rounds={args.rounds}", f"--epochs={args.epochs}"], "o1", timeout=1800)
    return code, [line[len("bench: "):].rstrip("\n") for line in lines if line.startswith("bench: ")]


def worker(args):
    """The msrun worker: plain data-parallel O0 against O2, rank 0 prints the table."""
    from mindspore.communication import get_group_size, get_rank, init  # pylint: disable=import-outside-toplevel
    init()
    ms.set_auto_parallel_context(parallel_mode=ms.ParallelMode.DATA_PARALLEL, gradients_mean=True)
    rank, rank_count = get_rank(), get_group_size()
    results = compare("O0", "O2", args.rounds, args.epochs, rank, rank_count)
    if rank == 0:
        for line in summarise(results, "O0", "O2", f"O2 vs plain data-parallel, {rank_count} workers"):
            print("bench: " + line, flush=True)
        print("bench: json " + json.dumps(results), flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    parser.add_argument("--quick", action="store_true", help="1 round of 6 epochs (a smoke run, noisy numbers)")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds (default: 3)")
    parser.add_argument("--epochs", type=int, default=12, help="epochs per arm and round (default: 12)")
    parser.add_argument("--skip-distributed", action="store_true", help="only the stand-alone O1 vs O0 part")
    parser.add_argument("--skip-standalone", action="store_true", help="only the msrun O2 vs plain part")
    parser.add_argument("--as-msrun-worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.quick:
        args.rounds, args.epochs = 1, 6
    ms.set_context(mode=ms.GRAPH_MODE)
    ms.set_device("CPU")
    if args.as_msrun_worker:
        worker(args)
        return 0
    print(f"bench/o1_speedup.py: ResNet (9 stages, BatchNorm) on the 8x8 digits, batch 32, {args.epochs} epochs, "
          f"freeze plan {FREEZE_PLAN}", flush=True)
    if not args.skip_standalone:
        results = compare("O0", "O1", args.rounds, args.epochs)
        print("\n".join(summarise(results, "O0", "O1", "O1 vs O0, stand-alone")), flush=True)
    if args.skip_distributed:
        return 0
    code, report = launch(args)
    print("\n".join(line for line in report if not line.startswith("json ")), flush=True)
    if code:
        print(f"the msrun part failed with exit code {code}", file=sys.stderr)
    return code


if __name__ == "__main__":
    sys.exit(main())
