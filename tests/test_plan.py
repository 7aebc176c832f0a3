"""The freezing plan (``boost_cells.freezing.schedule.plan``) says what the compiled step does: for every
``freeze_type`` and for a ``FreezeOpt`` given its own strategy, the group each update trains from and the groups frozen
for good equal what the train cell's schedule does step by step in GRAPH_MODE; the automatic schedule freezes only where
the plan says it decides. Its facts are the rules of ``boost_cells.freezing.schedule.sequences``, checked here against
them."""
import numpy as np
import pytest
from mindspore import Tensor, nn

from boost_cells import BoostTrainOneStepCell, FreezeOpt
from boost_cells.freezing import FreezePlan, freeze_index_sequence
from boost_cells.freezing.schedule.sequences import continuous_cycle, progressive_index
from tests.helpers import TanhMLP, freeze_config

STEPS = 14


def batches(count, seed=0):
    rng = np.random.RandomState(seed)
    return [(Tensor(rng.randn(8, 4).astype(np.float32)), Tensor(rng.randn(8, 3).astype(np.float32)))
            for _ in range(count)]


def trace(cell, count=STEPS):
    """(first trained group, groups frozen for good) before each of ``count`` steps, read from the schedule."""
    seen = []
    for x, y in batches(count):
        seen.append((cell.train_step.current_index(), cell.train_step.frozen_for_good()))
        cell(x, y)
    return seen


def cell_for(config_or_optimizer):
    net = TanhMLP()
    net_with_loss = nn.WithLossCell(net, nn.MSELoss())
    if isinstance(config_or_optimizer, dict):
        return BoostTrainOneStepCell(net_with_loss, nn.Momentum(net.trainable_params(), 0.1, 0.9),
                                     boost_config=config_or_optimizer)
    return BoostTrainOneStepCell(net_with_loss, config_or_optimizer(net))


SEQUENCE_CONFIGS = {
    "continuous": freeze_config(freeze_type=0, freeze_p=0.5),
    "continuous, freeze_p 0": freeze_config(freeze_type=0, freeze_p=0.0),
    "interval": freeze_config(freeze_type=1, freeze_p=0.4, total_steps=12),
    "progressive": freeze_config(freeze_type=2, freeze_p=0.25, total_steps=10),
}


@pytest.mark.parametrize("name", SEQUENCE_CONFIGS)
def test_the_plan_of_a_sequence_is_what_the_compiled_step_does(graph_mode, name):
    config = SEQUENCE_CONFIGS[name]
    cell = cell_for(config)
    plan = cell.freeze_plan
    assert plan == FreezePlan.from_section(dict(config["grad_freeze"], seed=0, **{
        key: value for key, value in (("auto_interval_share", 0.05), ("auto_warmup_share", 0.1),
                                      ("auto_threshold", 0.4))}))
    assert trace(cell) == [(plan.train_from(update), plan.frozen_for_good(update)) for update in range(STEPS)]


@pytest.mark.parametrize("cyclic", [True, False])
def test_the_plan_of_a_given_strategy_is_what_the_compiled_step_does(graph_mode, cyclic):
    def optimizer(net):
        params = net.trainable_params()
        return FreezeOpt(nn.Momentum(params, 0.1, 0.9), [params, params[4:], params[8:]], [0, 2, 1, 1, 2],
                         cyclic=cyclic)

    cell = cell_for(optimizer)
    plan = cell.freeze_plan
    assert plan.kind == "given" and not plan.depends_on_run
    assert trace(cell) == [(plan.train_from(update), plan.frozen_for_good(update)) for update in range(STEPS)]
    assert plan.frozen_levels == (() if cyclic else (1, 2))


def test_the_automatic_schedule_freezes_only_where_the_plan_decides(graph_mode):
    """Threshold 1000 (per 100 updates) and no loss condition: any weight counts as settled, so the schedule freezes
    at the first decisions it may take: exactly at the plan's first decision after the warm-up, then at the next
    ones."""
    config = freeze_config(freeze_type="auto", total_steps=20)
    config["grad_freeze"].update(auto_interval_share=0.1, auto_warmup_share=0.25, auto_threshold=1000,
                                 auto_loss_drop=0.0, auto_loss_last_fall=1.0)
    cell = cell_for(config)
    plan = cell.freeze_plan
    assert (plan.criterion.interval, plan.criterion.warmup, plan.first_frozen_update) == (2, 5, 6)
    seen = [frozen for _, frozen in trace(cell)]
    changes = [update for update in range(1, STEPS) if seen[update] != seen[update - 1]]
    assert changes and all(plan.decides_after(update) and update >= plan.criterion.warmup for update in changes)
    assert changes[0] + 1 >= plan.first_frozen_update


def test_the_plan_follows_the_rules_of_the_sequences():
    section = {"param_groups": 4, "freeze_type": 2, "freeze_p": 0.5, "total_steps": 100, "seed": 0,
               "auto_interval_share": 0.05, "auto_warmup_share": 0.3, "auto_threshold": 0.4, "auto_head_ratio": 0.5,
               "auto_loss_drop": 0.5, "auto_loss_last_fall": 0.1, "payback": False}
    plan = FreezePlan.from_section(section)
    assert plan.sequence == tuple(freeze_index_sequence(4, 2, 0.5, 100))
    assert plan.first_frozen_update == 51 and plan.stage_starts == ((1, 51), (2, 68), (3, 85))
    assert all(plan.train_from(t) == progressive_index(t, 4, 0.5, 100) for t in range(100))
    assert plan.for_run(60).first_frozen_update == 31 and plan.for_run(100) is plan
    continuous = FreezePlan.from_section(dict(section, freeze_type=0))
    assert continuous.continuous_cycle == tuple(continuous_cycle(4, 0.5)) and not continuous.depends_on_run
    assert continuous.for_run(7) is continuous
    auto = FreezePlan.from_section(dict(section, freeze_type="auto"))
    assert (auto.criterion.interval, auto.criterion.warmup, auto.first_frozen_update) == (5, 30, 31)
    assert auto.trained_from == (0, 3) and auto.frozen_levels == (3,) and not auto.payback
    paid = FreezePlan.from_section(dict(section, freeze_type="auto", payback=True))
    assert paid.trained_from == (0, 3) and paid.frozen_levels == (1, 2, 3) and paid.payback
    assert auto.train_from(40) is None and auto.for_run(1000).criterion.warmup == 300


@pytest.mark.parametrize("freeze_type, cache, payback, route", [
    ("auto", False, True, True), ("auto", False, False, False), ("auto", "auto", False, True),
    ("auto", True, False, True), (2, "auto", False, False), (2, True, False, True), (0, True, False, False),
    (1, False, False, False)])
def test_the_plan_says_whether_the_levels_run_on_the_host(freeze_type, cache, payback, route):
    """One answer to "is there a host route, or a cache?" (``host_route``, ``may_cache``), which the train cell builds
    by and ``explain`` reads: payback under the automatic schedule, or a cache asked for under a schedule that
    freezes groups for good ("auto": the automatic one alone). A cell built from the config without the cache has the
    route exactly where the plan says (the MLP has no stages, so a cell cannot take the cache here)."""
    section = {"param_groups": 3, "freeze_type": freeze_type, "freeze_p": 0.5, "total_steps": 100, "seed": 0,
               "auto_interval_share": 0.05, "auto_warmup_share": 0.3, "auto_threshold": 0.4, "auto_head_ratio": 0.5,
               "auto_loss_drop": 0.5, "auto_loss_last_fall": 0.1, "payback": payback, "cache_frozen_prefix": cache}
    plan = FreezePlan.from_section(section)
    assert plan.host_route == route and plan.may_cache == (bool(cache) and route)
    if not cache:
        config = freeze_config(param_groups=3, freeze_type=freeze_type, total_steps=100, payback=payback)
        assert (cell_for(config).level_route is not None) == route
