"""What selecting the frozen step inside the graph costs (issue 14).

Gradient freezing now picks the step of the scheduled suffix inside the compiled graph (``FreezeSwitch``: a switch
over one step per trained suffix, indexed by the schedule position). This measures, on a small conv net in
GRAPH_MODE on CPU:

1. per-step cost: a freezing train cell whose schedule holds one index k, against the step over that suffix alone
   (the same ``Step`` called directly, as the old host-side dispatch ran it, minus its host reads), in interleaved
   rounds; the median of per-round ratios is printed per k;
2. compile time against ``param_groups``: the first call of a freezing train cell (every branch compiles) against
   the first call of an O0 cell on the same network;
3. what the old host-side dispatch added per step: its three small device reads (the schedule position before the
   step, the optimizer's ``global_step`` before and after), timed on their own.

    python bench/freeze_switch.py [--rounds 20] [--steps 30]
"""
import argparse
import statistics
import time

import numpy as np
import mindspore as ms
from mindspore import Tensor, nn

from boost_cells import BoostTrainOneStepCell, FreezeOpt, GradientFreeze
from boost_cells.steps import Step, make_update_strategy
from boost_cells.config import BoostConfig
from boost_cells.distributed import parallel_info


class ConvNet(nn.Cell):
    """Eight 3x3 convs (16 channels, ReLU) and a Dense head on 16x16 inputs: 5 freezing layers by the reference's
    rule (a new layer starts at a weight once the current one holds 3 or more parameters)."""

    def __init__(self, depth=8):
        super().__init__()
        layers = [nn.Conv2d(1, 16, 3, has_bias=True), nn.ReLU()]
        for _ in range(depth - 1):
            layers += [nn.Conv2d(16, 16, 3, has_bias=True), nn.ReLU()]
        self.features = nn.SequentialCell(layers)
        self.head = nn.Dense(16 * 16 * 16, 10)
        self.flatten = nn.Flatten()

    def construct(self, x):
        return self.head(self.flatten(self.features(x)))


def setup(seed=0):
    ms.set_seed(seed)
    net = nn.WithLossCell(ConvNet(), nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean"))
    return net, nn.Momentum(net.trainable_params(), 0.01, 0.9)


def batch():
    rng = np.random.RandomState(0)
    return Tensor(rng.randn(32, 1, 16, 16).astype(np.float32)), Tensor(rng.randint(0, 10, 32).astype(np.int32))


def time_steps(cell, inputs, steps):
    start = time.perf_counter()
    for _ in range(steps):
        loss = cell(*inputs)
    if isinstance(loss, Tensor):
        loss.asnumpy()
    return (time.perf_counter() - start) / steps


def step_cost(args, groups=4):
    """Median per-round ratio (switch cell at index k) / (the suffix step alone), for each k."""
    inputs = batch()
    rows = []
    for index in range(groups):
        network, opt = setup()
        split = GradientFreeze(groups, 0, 0.5, 10).split_parameters_groups(network, groups)
        freeze_opt = FreezeOpt(opt, split, [index])
        switched = BoostTrainOneStepCell(network, freeze_opt, boost_config={"level": "O0"})
        suffix_opt = freeze_opt.opts[index]
        alone = Step(network, suffix_opt.parameters,
                     make_update_strategy(BoostConfig.level("O0"), suffix_opt, parallel_info()), 1.0)
        switched(*inputs)
        alone(*inputs)
        ratios = []
        for _ in range(args.rounds):
            a = time_steps(switched, inputs, args.steps)
            b = time_steps(alone, inputs, args.steps)
            ratios.append(a / b)
        rows.append((index, statistics.median(ratios), b * 1e3))
        if index == groups - 1:
            reads = time_steps(lambda: (int(switched.train_step.schedule.position.asnumpy()),
                                        int(opt.global_step.asnumpy()[0]), int(opt.global_step.asnumpy()[0])),
                               (), 1000)
            print(f"the old dispatch's 3 host reads: {reads * 1e6:.0f} us per step", flush=True)
        print(f"index {index}: switch / suffix step alone = {rows[-1][1]:.3f} (suffix step {b * 1e3:.2f} ms)",
              flush=True)
    return rows


def compile_times(group_counts=(1, 2, 3, 4, 5)):
    inputs = batch()
    for groups in group_counts:
        network, opt = setup()
        start = time.perf_counter()
        if groups == 1:
            cell = BoostTrainOneStepCell(network, opt, boost_config={"level": "O0"})
        else:
            config = {"boost": {"mode": "manual", "grad_freeze": True},
                      "grad_freeze": {"param_groups": groups, "freeze_type": 0, "freeze_p": 0.5, "total_steps": 100}}
            cell = BoostTrainOneStepCell(network, opt, boost_config=config)
        built = time.perf_counter()
        cell(*inputs).asnumpy()
        done = time.perf_counter()
        label = "O0 (no freezing)" if groups == 1 else f"param_groups {groups}"
        print(f"{label}: build {built - start:.2f} s, first call (compile) {done - built:.2f} s", flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--steps", type=int, default=30)
    args = parser.parse_args()
    ms.set_context(mode=ms.GRAPH_MODE, device_target="CPU")
    step_cost(args)
    compile_times()


if __name__ == "__main__":
    main()
