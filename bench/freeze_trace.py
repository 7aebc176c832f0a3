"""What the automatic freezing schedule sees: each segment's displacement, the head's included, at every decision of
a run that never freezes, on ``bench/o1_speedup.py``'s workloads.

    python bench/freeze_trace.py [--workload launch compute augment finetune vit vit-finetune] [--seed 0]

Each run is ``configs/O1.json`` through ``boost_cells.Model`` (``bench/o1_speedup.py``'s network, data, optimizer,
learning rate and epochs), stand-alone, with ``grad_freeze.auto_threshold`` and ``auto_head_ratio`` set so low that
no segment ever settles (the ratio above 0, so that the head is measured too): the schedule still decides every
interval, at the file's own decision points, so every decision's evidence is recorded, but the front trains to the
end. Printed per workload: the update of each decision and its share of the run, each segment's displacement (how far
its weights moved since the decision before, against their size, per 100 updates; the last segment is the head), each
front segment's displacement against the head's, the mean training loss of the steps since the decision before (a
network still at chance shows ln(classes), about 2.30 on the digits), and the first update at which the file's own
rule would have frozen the front (every front segment below ``auto_threshold``, or below ``auto_head_ratio`` times the
head, at two decisions in a row, from the warm-up on).
"""
import argparse
import json
import os

import numpy as np

import o1_speedup as speedup
from msrun_launch import ROOT

import mindspore as ms
from mindspore import nn
from mindspore.train import Callback

from boost_cells import Model
from boost_cells.freezing.schedule.plan import auto_criterion

with open(os.path.join(ROOT, "configs", "O1.json"), encoding="utf-8") as _handle:
    CONFIG = json.load(_handle)
SCHEDULE = CONFIG["grad_freeze"]
NEVER_SETTLES = 1e-9  # the threshold and head ratio of the traced runs: no displacement falls below them


class Decisions(Callback):
    """The schedule's displacements (host floats, one per group) after every step at which they changed: the
    decisions, as ``[(update, displacements)]`` (before the first decision they are all -1); and ``losses``, the mean
    training loss the steps returned since the decision before (since the start for the first), one per decision."""

    def __init__(self):
        super().__init__()
        self.decisions, self.update, self.last = [], 0, None
        self.step_losses, self.losses = [], []

    def on_train_step_end(self, run_context):
        params = run_context.original_args()
        out = params.net_outputs
        self.step_losses.append(float((out[0] if isinstance(out, (tuple, list)) else out).asnumpy()))
        self.update += 1
        schedule = params.train_network.train_step.schedule
        displacement = [float(value) for value in schedule.displacement.asnumpy()]
        if displacement != self.last and max(displacement) >= 0:
            since = self.decisions[-1][0] if self.decisions else 0
            self.losses.append(float(np.mean(self.step_losses[since:])))
            self.decisions.append((self.update, displacement))
        self.last = displacement


def trace(workload, seed):
    """``(decisions, updates, accuracy, losses)`` of one never-freezing run of ``workload`` (``Decisions``)."""
    epochs = speedup.DEFAULT_EPOCHS.get(workload, 12)
    x_train, x_test, y_train, y_test = speedup.workload_data(workload)
    net = speedup.starting_network(workload, seed)
    config = {**CONFIG, "grad_freeze": {**SCHEDULE, "auto_threshold": NEVER_SETTLES, "auto_head_ratio": NEVER_SETTLES}}
    training, peak = speedup.optimizer(workload, net.trainable_params())
    model = Model(net, nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean"), training, boost_level="O1",
                  boost_config_dict=config)
    decisions = Decisions()
    model.train(epochs, speedup.training_dataset(workload, x_train, y_train, 0, 1, seed),
                callbacks=[speedup.CosineLearningRate(peak, epochs), decisions], dataset_sink_mode=False)
    model.predict_network.set_train(False)
    return (decisions.decisions, decisions.update, speedup.accuracy(model.predict_network, x_test, y_test),
            decisions.losses)


def would_freeze(decisions, updates):
    """The first update at which the file's rule would have frozen the front, or None."""
    criterion = auto_criterion(updates, SCHEDULE["auto_interval_share"], SCHEDULE["auto_warmup_share"],
                               SCHEDULE["auto_threshold"], SCHEDULE["auto_head_ratio"])
    quiet = [all(0 <= value < max(criterion.threshold, criterion.head_ratio * head) for value in front)
             for _, (*front, head) in decisions]
    for index in range(1, len(decisions)):
        if quiet[index] and quiet[index - 1] and decisions[index][0] >= criterion.warmup:
            return decisions[index][0]
    return None


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    parser.add_argument("--workload", nargs="+", choices=tuple(speedup.WORKLOADS), default=list(speedup.WORKLOADS))
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    ms.set_context(mode=ms.GRAPH_MODE)
    ms.set_device("CPU")
    for workload in args.workload:
        decisions, updates, accuracy, losses = trace(workload, args.seed)
        print(f"{workload}, seed {args.seed}: {updates} updates, never frozen, held-out accuracy "
              f"{100 * accuracy:.2f}%; the file's rule (auto_threshold {SCHEDULE['auto_threshold']}, auto_head_ratio "
              f"{SCHEDULE['auto_head_ratio']}) would freeze the front at update {would_freeze(decisions, updates)}")
        front = range(len(decisions[0][1]) - 1)
        print("| update | share of the run | training loss | " + " | ".join(f"segment {index}" for index in front)
              + " | head | " + " | ".join(f"segment {index} / head" for index in front) + " |")
        print("| --- | --- | --- | " + " | ".join("---" for _ in range(2 * len(front) + 1)) + " |")
        for (update, (*moved, head)), loss in zip(decisions, losses):
            print(f"| {update} | {100 * update / updates:.0f}% | {loss:.3f} | "
                  + " | ".join(f"{value:.3f}" for value in moved) + f" | {head:.3f} | "
                  + " | ".join(f"{value / head:.2f}" if head > 0 else "-" for value in moved) + " |", flush=True)


if __name__ == "__main__":
    main()
