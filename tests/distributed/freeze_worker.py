"""Gradient-freezing scenarios for an msrun job; each rank writes ``<out>/<scenario>_rank<r>.npz``.

Usage (from tests/test_freeze_distributed.py): ``msrun ... tests/distributed/freeze_worker.py OUT_DIR SCENARIO...``.
Rank r trains on its rows of each global batch (``worker.shard``), so a test can replay the whole batch in NumPy.
"""
import os
import sys

import mindspore as ms
import numpy as np
from mindspore import Tensor, nn
from mindspore.communication import get_group_size

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from boost_cells import (  # noqa: E402
    BoostConfig, BoostTrainOneStepCell, BoostTrainOneStepWithLossScaleCell, DynamicLossScaleUpdate, Run)
from boost_cells.freezing import GradientFreeze  # noqa: E402
from tests.distributed.worker import ROWS, shard  # noqa: E402
from tests.helpers import TanhMLP, clocked_run, freeze_config, init_data_parallel, scale_free_run  # noqa: E402

STEPS = 4


def with_inf(labels):
    """``labels`` with an inf in the first entry (an inf input would be squashed to 1 by tanh)."""
    values = labels.asnumpy()
    values[0, 0] = np.inf
    return Tensor(values)


def run(cell, rank, size, poison_step=None, steps=STEPS):
    """``steps`` steps; returns the first trained group of each step and every Parameter of the cell at the end.
    At ``poison_step`` the last rank's labels hold an inf."""
    batches = [shard(step, rank, size) for step in range(steps)]
    if poison_step is not None and rank == size - 1:
        batches[poison_step] = (batches[poison_step][0], with_inf(batches[poison_step][1]))
    indices, overflows = [], []
    for inputs in batches:
        indices.append(cell.train_step.current_index())
        outputs = cell(*inputs)
        overflows += [bool(outputs[1].asnumpy())] if isinstance(outputs, tuple) else []
    state = {p.name: p.asnumpy() for _, p in cell.parameters_and_names()}
    return {**state, "indices": np.array(indices), "overflows": np.array(overflows)}


def scenario_freeze(rank, size):
    """Data-parallel Momentum with the continuous schedule (3 groups: indices 0, 0, 1, 2)."""
    net = TanhMLP()
    opt = nn.Momentum(net.trainable_params(), learning_rate=0.1, momentum=0.9)
    return run(BoostTrainOneStepCell(nn.WithLossCell(net, nn.MSELoss()), opt, boost_config=freeze_config()),
               rank, size)


def scenario_freeze_adasum(rank, size):
    """Freezing with AdaSum across 2 groups of 1 rank (the reference's freeze path drops AdaSum)."""
    net = TanhMLP()
    opt = nn.SGD(net.trainable_params(), learning_rate=0.1)
    config = freeze_config(boost={"adasum": True}, common={"device_number": 1})
    return run(BoostTrainOneStepCell(nn.WithLossCell(net, nn.MSELoss()), opt, boost_config=config), rank, size)


def scenario_freeze_overflow(rank, size):
    """Loss-scaled freezing (2 groups: 0, 1, 0, 1) with an inf planted on the last rank at step 1 (index 1)."""
    net = TanhMLP()
    opt = nn.Momentum(net.trainable_params(), learning_rate=0.1, momentum=0.9)
    cell = BoostTrainOneStepWithLossScaleCell(nn.WithLossCell(net, nn.MSELoss()), opt,
                                              DynamicLossScaleUpdate(2.0 ** 10, window=50),
                                              boost_config=freeze_config(param_groups=2))
    return run(cell, rank, size, poison_step=1)


def scenario_freeze_auto(rank, size):
    """The automatic schedule: each rank's own gradients differ, but the replicas' weights are the same, so every
    rank measures the same displacements and decides alike (every 2 updates; threshold 1000 and no loss condition,
    on targets of noise: it freezes at the first decision that has two intervals)."""
    net = TanhMLP()
    opt = nn.Momentum(net.trainable_params(), learning_rate=0.1, momentum=0.9)
    config = freeze_config(freeze_type="auto")
    config["grad_freeze"].update(auto_interval_share=0.2, auto_warmup_share=0.2, auto_threshold=1000,  # of 10
                                 auto_loss_drop=0.0, auto_loss_last_fall=1.0)
    return run(BoostTrainOneStepCell(nn.WithLossCell(net, nn.MSELoss()), opt, boost_config=config), rank, size,
               steps=8)


def staged_mlp():
    """Dense-tanh, dense-tanh, dense: three stages, 4 inputs to 3 outputs, seeded (the same on every rank)."""
    ms.set_seed(0)
    return nn.SequentialCell([nn.SequentialCell([nn.Dense(4, 8), nn.Tanh()]),
                              nn.SequentialCell([nn.Dense(8, 8), nn.Tanh()]), nn.Dense(8, 3)])


def cached_run(rank, size, cache, dealt=False):
    """Progressive freezing at stage boundaries (indices 0, 0, 1, 1, 1, 2, 2, 2) over 2 global batches seen 4 times
    each, with or without the frozen-prefix cache; both runs use the cache's FreezeOpt (groups at stages). ``dealt``:
    the run gives its 2 steps an epoch (``fit_to_run``) and, as a sampler that deals the samples out anew every epoch
    would, rank r takes rank (r + epoch) % size's rows of each batch."""
    net = staged_mlp()
    config = freeze_config(freeze_type=2, freeze_p=0.2, total_steps=8)
    config["grad_freeze"]["cache_frozen_prefix"] = cache
    freezing = GradientFreeze(**{**BoostConfig.from_dict(config).section("grad_freeze"), "cache_frozen_prefix": True})
    opt = freezing.freeze_generate(net, nn.Momentum(net.trainable_params(), learning_rate=0.1, momentum=0.9))[1]
    cell = BoostTrainOneStepCell(nn.WithLossCell(net, nn.MSELoss()), opt, boost_config=config)
    if dealt:
        cell.fit_to_run(Run(None, 2))
    indices = []
    for step in range(8):
        indices.append(cell.train_step.current_index())
        cell(*shard(step % 2, (rank + step // 2) % size if dealt else rank, size))
    cache = cell.prefix_cache
    counts = (cache.hits, cache.received) if cache is not None else (-1, -1)
    return {**{p.name: p.asnumpy() for p in net.trainable_params()}, "indices": np.array(indices),
            "hits": np.array(counts[0]), "received": np.array(counts[1])}


def scenario_freeze_payback(rank, size):
    """Payback, data-parallel, with a clock per rank (tests/helpers.py's ``clocked_run``): steps of 1.0, 0.7 and
    0.4 s at levels 0, 1 and 2 on both ranks, a compile of 30 s on rank 0 and 1 s on rank 1. Alone, rank 0 would
    allow no level (by the prior, the whole front saves about 0.11 s a step, 21 s over the 194 steps left; the front
    group alone half that) and rank 1 every one; the ranks average their ledgers (a compile of 15.5 s), so both allow
    the whole front's level alone and freeze it
    at the same step (threshold 1000: every segment settles at the second decision). The ledgers themselves differ
    (each rank's clock) and are left out of the state."""
    net = TanhMLP()
    opt = nn.Momentum(net.trainable_params(), learning_rate=0.1, momentum=0.9)
    config = freeze_config(freeze_type="auto", total_steps=200, payback=True)
    config["grad_freeze"].update(auto_interval_share=0.01, auto_warmup_share=0.01, auto_threshold=1000,
                                 auto_loss_drop=0.0, auto_loss_last_fall=1.0)
    cell = BoostTrainOneStepCell(nn.WithLossCell(net, nn.MSELoss()), opt, boost_config=config)
    batches = [shard(step, rank, size) for step in range(12)]
    trace, _ = clocked_run(cell, batches, {0: 1.0, 1: 0.7, 2: 0.4}, 30.0 if rank == 0 else 1.0)
    state = {p.name: p.asnumpy() for _, p in cell.parameters_and_names() if ".ledger." not in p.name}
    return {**state, "indices": np.array(trace)}


def scenario_freeze_cache_auto(rank, size):
    """The frozen-prefix cache on "auto", data-parallel, with a clock per rank: steps of 1.0 and 0.7 s at levels 0
    and 1 on both ranks, a compile of 0.5 s; a step the cache serves takes 0.2 s on rank 0 and 0.9 s on rank 1. Alone,
    rank 1 would drop the cache after its A/B (0.9 s against 0.7 s on the batch); the ranks average their ledgers
    (0.55 s), so both keep it, and train alike (2 global batches an epoch, seen 16 times; the stem freezes at the
    first decision, threshold 1000, no loss condition). The ledgers differ (each rank's clock) and are left out of
    the state."""
    net = staged_mlp()
    config = freeze_config(freeze_type="auto", total_steps=32, payback=False, param_groups=2)
    config["grad_freeze"].update(auto_interval_share=2 / 32, auto_warmup_share=4 / 32, auto_threshold=1000,
                                 auto_loss_drop=0.0, auto_loss_last_fall=1.0, cache_frozen_prefix="auto")
    opt = nn.Momentum(net.trainable_params(), learning_rate=0.1, momentum=0.9)
    cell = BoostTrainOneStepCell(nn.WithLossCell(net, nn.MSELoss()), opt, boost_config=config)
    cell.fit_to_run(Run(None, 2))
    seconds = {0: 1.0, 1: 0.7, "cached": 0.2 if rank == 0 else 0.9}
    trace, _ = clocked_run(cell, [shard(step % 2, rank, size) for step in range(32)], seconds, 0.5)
    state = {p.name: p.asnumpy() for _, p in cell.parameters_and_names() if ".ledger." not in p.name}
    codes = [2 if level == "cached" else level for level in trace]
    return {**state, "indices": np.array(codes), "caching": np.array(cell.level_route.caching),
            "hits": np.array(cell.prefix_cache.hits)}


def scenario_freeze_loss(rank, size, route=False):
    """The automatic schedule's loss condition (``auto_loss_drop`` 0.5), data-parallel: each rank trains on its own
    rows of learnable batches (targets a fixed linear map of the inputs), so each rank's own losses differ; the
    interval's losses are summed over the ranks at each decision, so both ranks freeze at the same update, once the
    global batch's loss has halved (threshold 6: the front's displacement settles from the first decisions). With
    ``route``, payback's host route takes the decisions, op by op between steps (the sum's all-reduce run outside
    any graph), with a clock on which every level pays from the fifth call (compiles of 0 s); it skips the decisions
    before (none may freeze), so its first interval's mean spans the first five updates and lies lower: the loss
    must fall by 20% of it, however steeply it still falls (``auto_loss_last_fall`` 1)."""
    net = TanhMLP()
    opt = nn.Momentum(net.trainable_params(), learning_rate=0.1, momentum=0.9)
    config = freeze_config(freeze_type="auto", payback=route, total_steps=20)
    config["grad_freeze"].update(auto_interval_share=0.1, auto_warmup_share=0.15, auto_threshold=6.0,  # of 20
                                 auto_loss_drop=0.2 if route else 0.5)
    if route:
        config["grad_freeze"]["auto_loss_last_fall"] = 1.0
    cell = BoostTrainOneStepCell(nn.WithLossCell(net, nn.MSELoss()), opt, boost_config=config)
    teacher = np.random.RandomState(99).randn(4, 3) * 0.5
    batches = []
    for step in range(20):
        x = np.random.RandomState(100 * step + rank).randn(ROWS, 4).astype(np.float32)
        batches.append((Tensor(x), Tensor((x @ teacher).astype(np.float32))))
    if route:
        indices, _ = clocked_run(cell, batches, {0: 1.0, 1: 0.7, 2: 0.4}, 0.0)
    else:
        indices = []
        for inputs in batches:
            indices.append(cell.train_step.current_index())
            cell(*inputs)
    state = {p.name: p.asnumpy() for _, p in cell.parameters_and_names() if ".ledger." not in p.name}
    return {**state, "indices": np.array(indices), "routed": np.array(cell.level_route is not None)}


def scenario_freeze_scale(rank, size):
    """The automatic schedule through Model.train over this rank's shard of 64 samples (tests/helpers.py's
    ``scale_free_run``): half the updates per epoch of a stand-alone run."""
    return scale_free_run(64, rank=rank, size=size)


SCENARIOS = {"freeze_scale": scenario_freeze_scale, "freeze": scenario_freeze, "freeze_auto": scenario_freeze_auto,
             "freeze_loss": scenario_freeze_loss, "freeze_loss_route": lambda r, s: scenario_freeze_loss(r, s, True),
             "freeze_payback": scenario_freeze_payback, "freeze_cache_auto": scenario_freeze_cache_auto,
             "freeze_adasum": scenario_freeze_adasum,
             "freeze_overflow": scenario_freeze_overflow, "freeze_cached": lambda r, s: cached_run(r, s, True),
             "freeze_uncached": lambda r, s: cached_run(r, s, False),
             "freeze_dealt_cached": lambda r, s: cached_run(r, s, True, dealt=True),
             "freeze_dealt_uncached": lambda r, s: cached_run(r, s, False, dealt=True)}


def main():
    rank = init_data_parallel()
    size = get_group_size()
    for name in sys.argv[2:]:
        np.savez(os.path.join(sys.argv[1], f"{name}_rank{rank}.npz"), **SCENARIOS[name](rank, size))
        print(f"rank {rank}: scenario {name} done", flush=True)


if __name__ == "__main__":
    main()
