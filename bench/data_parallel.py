"""Data-parallel benchmark (2 workers, CPU collective backend): communication per accumulation cycle and
per-step time of all-reduce vs AdaSum training.

    python bench/data_parallel.py [--rounds 20] [--steps 10]

The script relaunches itself under ``msrun --worker_num=2`` and rank 0 prints the results.

1. Gradient all-reduce rounds per accumulation cycle (k=4), counted at run time by a counting wrapper around the
   gradient reducer: our cell (reduce once per cycle) vs reducing every micro-step (the arrangement it replaces,
   ``ReduceEveryMicroStep`` from the data-parallel tests' worker),
   plus the per-cycle time of each, measured interleaved.
2. Per-step time of O0 all-reduce training vs AdaSum training (device_number 1, two groups) on a small MLP,
   interleaved blocks, median of per-round ratios.
"""
import argparse
import sys
import time

import numpy as np
from msrun_launch import relaunch


def launch(args):
    code, lines = relaunch(__file__, [f"--rounds={args.rounds}", f"--steps={args.steps}"], "dp", timeout=900)
    print("".join(line for line in lines if line.startswith("|") or line.startswith("bench:")))
    return code


def worker(args):
    import mindspore as ms
    from mindspore import Parameter, Tensor, nn, ops
    from mindspore.common import dtype as mstype
    from mindspore.communication import get_rank, init

    from boost_cells import BoostTrainOneStepCell
    from tests.distributed.worker import ReduceEveryMicroStep

    ms.set_context(mode=ms.GRAPH_MODE, device_target="CPU")
    init()
    ms.set_auto_parallel_context(parallel_mode=ms.ParallelMode.DATA_PARALLEL, gradients_mean=True)
    rank = get_rank()

    class CountingReducer(nn.Cell):
        """The gradient reducer, counting how often it runs (a Parameter, so only executed calls count)."""

        def __init__(self, reducer):
            super().__init__(auto_prefix=False)
            self.reducer = reducer
            self.calls = Parameter(Tensor(0, mstype.int32), name="bench.reducer_calls", requires_grad=False)

        def construct(self, grads):
            return ops.depend(self.reducer(grads), ops.assign_add(self.calls, 1))

    def mlp():
        ms.set_seed(0)
        net = nn.SequentialCell([nn.Dense(64, 256), nn.ReLU(), nn.Dense(256, 256), nn.ReLU(), nn.Dense(256, 10)])
        return net, nn.WithLossCell(net, nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean"))

    rng = np.random.RandomState(rank)
    x = Tensor(rng.randn(32, 64).astype(np.float32))
    y = Tensor(rng.randint(0, 10, 32).astype(np.int32))
    k = 4
    accumulation = {"boost": {"mode": "manual", "grad_accumulation": True},
                    "grad_accumulation": {"grad_accumulation_step": k}}

    net, net_with_loss = mlp()
    ours = BoostTrainOneStepCell(net_with_loss, nn.Momentum(net.trainable_params(), 0.01, 0.9),
                                 boost_config=accumulation)
    ours.update.set_grad_reducer(CountingReducer(ours.update.grad_reducer))
    net, net_with_loss = mlp()
    before = ReduceEveryMicroStep(net_with_loss, nn.Momentum(net.trainable_params(), 0.01, 0.9), k)
    before.reducer = CountingReducer(before.reducer)
    tensors = len(net.trainable_params())

    def timed(cell, steps):
        start = time.perf_counter()
        for _ in range(steps):
            out = cell(x, y)
        out.asnumpy()
        return (time.perf_counter() - start) / steps

    def interleaved(cell_a, cell_b, steps):
        """Median of per-round time ratios a/b, and median per-step times (ms), alternating who goes first."""
        timed(cell_a, steps)
        timed(cell_b, steps)
        ratios, times_a, times_b = [], [], []
        for round_index in range(args.rounds):
            if round_index % 2:
                time_b, time_a = timed(cell_b, steps), timed(cell_a, steps)
            else:
                time_a, time_b = timed(cell_a, steps), timed(cell_b, steps)
            ratios.append(time_a / time_b)
            times_a.append(time_a)
            times_b.append(time_b)
        return float(np.median(ratios)), 1e3 * float(np.median(times_a)), 1e3 * float(np.median(times_b))

    counters = (ours.update.grad_reducer.calls, before.reducer.calls)
    for counter in counters:
        counter.set_data(Tensor(0, mstype.int32))
    cycles_run = 3
    for _ in range(cycles_run * k):
        ours(x, y)
        before(x, y)
    ours_calls, before_calls = (int(c.asnumpy()) // cycles_run for c in counters)
    ratio, ours_ms, before_ms = interleaved(ours, before, k * args.steps // 2)

    net, net_with_loss = mlp()
    allreduce = BoostTrainOneStepCell(net_with_loss, nn.SGD(net.trainable_params(), 0.01),
                                      boost_config={"level": "O0"})
    net, net_with_loss = mlp()
    adasum = BoostTrainOneStepCell(net_with_loss, nn.SGD(net.trainable_params(), 0.01),
                                   boost_config={"boost": {"mode": "manual", "adasum": True},
                                                 "common": {"device_number": 1}})
    adasum_ratio, adasum_ms, allreduce_ms = interleaved(adasum, allreduce, args.steps)
    if rank == 0:
        print(f"bench: 2 workers, MLP 64-256-256-10 ({tensors} gradient tensors), batch 32 per rank, "
              f"{args.rounds} interleaved rounds", flush=True)
        print("| measure | reduce every micro-step | ours (once per cycle) | ratio ours/before |", flush=True)
        print("| --- | --- | --- | --- |", flush=True)
        print(f"| gradient reducer calls per cycle (k={k}) | {before_calls} | {ours_calls} | "
              f"{ours_calls / before_calls:.2f} |", flush=True)
        print(f"| AllReduce ops issued per cycle (calls x tensors) | {before_calls * tensors} | {ours_calls * tensors} | "
              f"{ours_calls / before_calls:.2f} |", flush=True)
        print(f"| time per micro-step (ms, median) | {before_ms:.3f} | {ours_ms:.3f} | {ratio:.3f} |", flush=True)
        print("", flush=True)
        print("| step | all-reduce (O0) ms | AdaSum ms | median ratio AdaSum/all-reduce |", flush=True)
        print("| --- | --- | --- | --- |", flush=True)
        print(f"| one training step | {allreduce_ms:.3f} | {adasum_ms:.3f} | {adasum_ratio:.3f} |", flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=20, help="interleaved timing rounds")
    parser.add_argument("--steps", type=int, default=10, help="steps per timed block")
    parser.add_argument("--as-msrun-worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.as_msrun_worker:
        worker(args)
    else:
        sys.exit(launch(args))


if __name__ == "__main__":
    main()
