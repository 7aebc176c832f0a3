"""Data-parallel scenarios run by every rank of an msrun job; each writes ``<out>/<scenario>_rank<r>.npz``.

Usage (from tests/test_distributed.py): ``msrun ... tests/distributed/worker.py OUT_DIR SCENARIO [SCENARIO...]``.
Rank r of n trains on rows ``[r*m, (r+1)*m)`` of each global batch, so a test can replay the whole batch in NumPy.
"""
import json
import os
import sys

import numpy as np
import mindspore as ms
from mindspore import Tensor, nn, ops
from mindspore.communication import get_group_size, get_rank, init

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from boost_cells import (AdaSum, BoostTrainOneStepCell, BoostTrainOneStepWithLossScaleCell,  # noqa: E402
                         DynamicLossScaleUpdate, GradientAccumulation, build_train_network)
from boost_cells.distributed import make_grad_reducer, parallel_info  # noqa: E402
from tests.helpers import TanhMLP, accumulation, batch, linear_setup  # noqa: E402

ROWS = 4  # rows per rank per micro-batch
ADASUM_SHAPES = [(3, 4), (3,), (2, 2, 2), (5,)]
OUT_DIR = None  # set by main: scenarios that read inputs (planted_plans) find them there
# The planted-fault plans' policy: powers of two, window 2, hysteresis 2 (tests/test_distributed.py renders it).
PLAN_POLICY = dict(loss_scale_value=2.0 ** 10, factor=2.0, window=2, min_scale=2.0 ** 8, max_scale=2.0 ** 12,
                   hysteresis=2)
O2_GROUPS_OF_2 = {"level": "O2", "common": {"device_number": 2},
                  "grad_freeze": {"param_groups": 2, "freeze_type": 1, "freeze_p": 0.5, "total_steps": 8}}


def adasum_config(device_number):
    return {"boost": {"mode": "manual", "adasum": True}, "common": {"device_number": device_number}}


def shard(step, rank, size):
    """This rank's rows of global batch ``step`` (ROWS * size rows)."""
    x, y = batch(n=ROWS * size, seed=step)
    return Tensor(x[rank * ROWS:(rank + 1) * ROWS]), Tensor(y[rank * ROWS:(rank + 1) * ROWS])


def weights(net):
    return {p.name: p.asnumpy() for p in net.trainable_params()}


def train(cell, steps, rank, size, poison=None):
    """Run ``steps`` steps; ``poison=(step, rank)`` puts an inf into that rank's batch at that step."""
    overflows, scales = [], []
    for step in range(steps):
        x, y = shard(step, rank, size)
        if poison == (step, rank):
            values = x.asnumpy()
            values[0, 0] = np.inf
            x = Tensor(values)
        out = cell(x, y)
        if isinstance(out, tuple):
            overflows.append(bool(out[1].asnumpy()))
            scales.append(float(out[2].asnumpy()))
    return overflows, scales


def scenario_o0(rank, size):
    net, net_with_loss, opt = linear_setup("momentum")
    train(BoostTrainOneStepCell(net_with_loss, opt, boost_config={"level": "O0"}), 3, rank, size)
    return weights(net)


def scenario_planted_inf(rank, size):
    net, net_with_loss, opt = linear_setup("momentum")
    cell = BoostTrainOneStepWithLossScaleCell(net_with_loss, opt, DynamicLossScaleUpdate(2.0 ** 10, window=2),
                                              boost_config={"level": "O0"})
    overflows, scales = train(cell, 4, rank, size, poison=(1, size - 1))
    return {**weights(net), "overflows": np.array(overflows), "scales": np.array(scales)}


def scenario_accumulate(rank, size):
    net, net_with_loss, opt = linear_setup("momentum")
    train(BoostTrainOneStepCell(net_with_loss, opt, boost_config=accumulation(2)), 6, rank, size)
    return weights(net)


def scenario_accumulate_loss_scaled(rank, size):
    net, net_with_loss, opt = linear_setup("momentum")
    cell = BoostTrainOneStepWithLossScaleCell(net_with_loss, opt, DynamicLossScaleUpdate(2.0 ** 10, window=3),
                                              boost_config=accumulation(2))
    overflows, _ = train(cell, 6, rank, size, poison=(2, size - 1))
    return {**weights(net), "overflows": np.array(overflows)}


class ReduceEveryMicroStep(nn.Cell):
    """The arrangement accumulation avoids: all-reduce each micro-step's gradients, accumulate the reduced ones."""

    def __init__(self, net_with_loss, opt, k):
        super().__init__(auto_prefix=False)
        self.net_with_loss = net_with_loss
        self.weights = opt.parameters
        self.grad = ops.GradOperation(get_by_list=True)
        self.reducer = make_grad_reducer(opt.parameters, parallel_info())
        self.accumulate = GradientAccumulation(k, opt)

    def construct(self, x, y):
        loss = self.net_with_loss(x, y)
        grads = self.reducer(self.grad(self.net_with_loss, self.weights)(x, y))
        return self.accumulate(loss, grads)


def scenario_reduce_every_micro_step(rank, size):
    net, net_with_loss, opt = linear_setup("momentum")
    train(ReduceEveryMicroStep(net_with_loss, opt, 2), 6, rank, size)
    return weights(net)


def adasum_deltas(rank):
    """Rank ``rank``'s random deltas for ADASUM_SHAPES (seed 100 + rank); the last tensor is all zeros on even
    ranks, so the first level combines zero with non-zero (adasum(0, b) = b)."""
    rng = np.random.RandomState(100 + rank)
    deltas = [rng.randn(*shape).astype(np.float32) for shape in ADASUM_SHAPES]
    if rank % 2 == 0:
        deltas[-1][:] = 0
    return deltas


def scenario_adasum_combine(rank, size):
    """AdaSum of per-rank random deltas (one group per rank), a tensor that is zero on some ranks included."""
    deltas = adasum_deltas(rank)
    params = [ms.Parameter(Tensor(d), name=f"p{i}") for i, d in enumerate(deltas)]
    combined = AdaSum(rank, 1, size, params).combine(tuple(Tensor(d) for d in deltas))
    return {f"t{i}": c.asnumpy() for i, c in enumerate(combined)}


def _adasum_train(rank, size, device_number):
    net, net_with_loss, opt = linear_setup("sgd")
    train(BoostTrainOneStepCell(net_with_loss, opt, boost_config=adasum_config(device_number)), 2, rank, size)
    return weights(net)


def scenario_adasum_train(rank, size):
    return _adasum_train(rank, size, 1)


def scenario_adasum_train_groups_of_2(rank, size):
    return _adasum_train(rank, size, 2)


def scenario_adasum_accumulate(rank, size):
    net, net_with_loss, opt = linear_setup("sgd")
    config = {**adasum_config(1), "boost": {"mode": "manual", "adasum": True, "grad_accumulation": True},
              "grad_accumulation": {"grad_accumulation_step": 2}}
    train(BoostTrainOneStepCell(net_with_loss, opt, boost_config=config), 4, rank, size)
    return weights(net)


def scenario_adasum_bad_rank_count(rank, size):
    """AdaSum with groups of 2 on 2 ranks is one group: it must refuse, naming the rank count."""
    _, net_with_loss, opt = linear_setup("sgd")
    try:
        BoostTrainOneStepCell(net_with_loss, opt, boost_config=adasum_config(2))
    except ValueError as error:
        return {"message": np.array(str(error))}
    return {"message": np.array("no error")}


def scenario_planted_plans(rank, size):
    """Planted faults drawn by Hypothesis (``OUT_DIR/plans.json``): per plan, an inf/-inf/nan in one rank's inputs
    or labels at chosen steps. One cell per kind (plain and accumulation over 2 micro-steps, both under the
    dynamic policy PLAN_POLICY), reset between plans; records per plan the flags, scales, whether every Parameter
    stayed finite after every step, and every Parameter at the end."""
    with open(os.path.join(OUT_DIR, "plans.json"), encoding="utf-8") as handle:
        plans = json.load(handle)
    cells = {}
    for kind in ("plain", "accumulation"):
        _, net_with_loss, opt = linear_setup("momentum")
        config = accumulation(2) if kind == "accumulation" else {"level": "O0"}
        cell = BoostTrainOneStepWithLossScaleCell(net_with_loss, opt, DynamicLossScaleUpdate(**PLAN_POLICY),
                                                  boost_config=config)
        cells[kind] = (cell, {p.name: p.asnumpy().copy() for p in cell.get_parameters()})
    out = {}
    for index, plan in enumerate(plans):
        cell, initial = cells[plan["kind"]]
        for param in cell.get_parameters():
            ops.assign(param, Tensor(initial[param.name]))
        flags, scales, finite = [], [], []
        for step, fault in enumerate(plan["steps"]):
            x, y = shard(step, rank, size)
            if fault is not None and fault["rank"] == rank:
                values = (x if fault["site"] == "x" else y).asnumpy()
                values.reshape(-1)[fault["where"] % values.size] = float(fault["value"])
                x, y = (Tensor(values), y) if fault["site"] == "x" else (x, Tensor(values))
            _, overflow, scale = cell(x, y)
            flags.append(bool(overflow.asnumpy()))
            scales.append(float(scale.asnumpy().reshape(-1)[0]))
            finite.append(all(np.all(np.isfinite(p.asnumpy())) for p in cell.get_parameters()
                              if p.dtype in (ms.float32, ms.float16)))
        out.update({f"{index}.flags": np.array(flags), f"{index}.scales": np.array(scales),
                    f"{index}.finite": np.array(finite)})
        # copies: asnumpy() may share the Parameter's buffer, which the next plan's reset overwrites
        out.update({f"{index}.{p.name}": p.asnumpy().copy() for p in cell.get_parameters()})
    return out


def scenario_o2_groups_of_2(rank, size):
    """Level O2 (LessBN's head, interval freezing over 2 groups, AdaSum) in AdaSum groups of 2 ranks: 4 steps of
    TanhMLP; every Parameter at the end. Run as one launch of 4 and as two launches of 2 (--node_rank)."""
    ms.set_seed(0)
    net = TanhMLP()
    cell = build_train_network(nn.WithLossCell(net, nn.MSELoss()), nn.Momentum(net.trainable_params(), 0.1, 0.9),
                               O2_GROUPS_OF_2)
    train(cell, 4, rank, size)
    return {p.name: p.asnumpy() for p in cell.get_parameters()}


def scenario_die(rank, size):
    """Rank 1 fails after one step while rank 0 goes on into the next all-reduce."""
    net, net_with_loss, opt = linear_setup("momentum")
    cell = BoostTrainOneStepCell(net_with_loss, opt, boost_config={"level": "O0"})
    train(cell, 1, rank, size)
    if rank == 1:
        raise RuntimeError("planted failure on rank 1")
    train(cell, 50, rank, size)
    return weights(net)


def main():
    global OUT_DIR  # pylint: disable=global-statement
    out_dir, scenarios = sys.argv[1], sys.argv[2:]
    OUT_DIR = out_dir
    ms.set_context(mode=ms.GRAPH_MODE, device_target="CPU")
    init()
    ms.set_auto_parallel_context(parallel_mode=ms.ParallelMode.DATA_PARALLEL, gradients_mean=True)
    rank, size = get_rank(), get_group_size()
    for name in scenarios:
        result = globals()["scenario_" + name](rank, size)
        np.savez(os.path.join(out_dir, f"{name}_rank{rank}.npz"), **result)
        print(f"rank {rank}: scenario {name} done", flush=True)


if __name__ == "__main__":
    main()
