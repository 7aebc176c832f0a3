"""The frozen-prefix cache on "auto": it fills only where samples repeat (probed over the run's first epoch)
and the run's steps left repay its compiles, and stays only where the steps it serves measure faster than the same
level's steps on the batch; otherwise it steps aside with one warning that gives the measured figures. Where the
front freezes group by group, a cache that does not pay at the first level weighs again at the next. Every decision
is driven by a clock the test sets, so no test depends on this machine's speed. The rule (``cache_pays``) against its
arithmetic written out; "auto" applies only where the cache can (stages enough, the automatic schedule), silently off
elsewhere; data-parallel, the ranks' ledgers average only the figures every rank knows."""
import warnings

import mindspore as ms
import numpy as np
import pytest
from mindspore import Tensor, nn

from boost_cells import BoostConfig, BoostConfigWarning, BoostTrainOneStepCell, Run
from boost_cells.freezing import GradientFreeze, freeze_optimizer
from boost_cells.freezing.suffixes.groups import stage_starts
from boost_cells.freezing.host.payback import (FORWARD_SHARE, PRIOR_SAVING, Costs, cache_pays, cache_saving,
                                         cache_saving_source, layer_shares)
from tests.helpers import TanhMLP, auto_config, clocked_run, data, shuffled_epochs

STEPS, EPOCHS = 4, 12  # an epoch's steps (shuffled_epochs' default), the run's epochs
SHARES = layer_shares([1, 1])


def test_the_cache_fills_where_the_steps_after_an_epoch_repay_two_compiles():
    """Level 1 saved 0.3 s a step (1.0 s full, 0.7 s frozen): the cache is expected to save FORWARD_SHARE of it until
    measured. 2 compiles of 1 s need (steps_left - epoch) * 0.15 > 2: 18 steps left after an epoch of 4 pay, 17
    do not; once measured (0.2 s a cached step) the measured 0.5 s counts."""
    costs = Costs(step={0: 1.0, 1: 0.7}, compile={0: 1.0}, shares=SHARES)
    assert cache_saving(costs, 1) == pytest.approx(FORWARD_SHARE * 0.3)
    assert cache_pays(costs, 1, 4 + 14, 4) and not cache_pays(costs, 1, 4 + 13, 4)
    measured = Costs(step={0: 1.0, 1: 0.7}, compile={0: 1.0}, shares=SHARES, cached_step={1: 0.2})
    assert cache_saving(measured, 1) == pytest.approx(0.5) and cache_pays(measured, 1, 4 + 5, 4)
    assert not cache_pays(Costs(step={}, compile={}, shares=SHARES), 1, 10 ** 6, 4)  # nothing measured yet


def test_the_caches_prior_saving_is_at_most_the_levels_own_step():
    """A full step timed on a loaded machine (2.8 s) against a frozen step of 0.5 s: half the level's saving (1.15 s)
    would be more than the whole step the cache serves; the prior stops at the step, and says so."""
    costs = Costs(step={0: 2.8, 1: 0.5}, compile={0: 1.0}, shares=SHARES)
    assert cache_saving(costs, 1) == pytest.approx(0.5)
    assert cache_saving_source(costs, 1).endswith("(at most the level's own step)")
    assert cache_saving(Costs(step={0: 2.8}, compile={0: 1.0}, shares=SHARES), 1) == pytest.approx(
        FORWARD_SHARE * 2.8 * PRIOR_SAVING * SHARES[1])  # the level not yet measured: no bound from it


def staged_cell(cache="auto", seed=0):
    """Dense-Tanh, Dense-Tanh, Dense (3 stages with parameters) under the automatic schedule of 2 groups cut at the
    stages: the front stage freezes for good at the first decision after the warm-up (threshold 1000: every segment
    has settled), for a run of EPOCHS epochs of STEPS updates; payback off, so the level does not depend on the
    clock and a run without the cache freezes alike."""
    rng = np.random.RandomState(seed)

    def dense(cin, cout):
        return nn.Dense(cin, cout, weight_init=Tensor(rng.randn(cout, cin).astype(np.float32) * 0.3),
                        bias_init="zeros")

    net = nn.SequentialCell([nn.SequentialCell([dense(4, 16), nn.Tanh()]),
                             nn.SequentialCell([dense(16, 16), nn.Tanh()]), dense(16, 3)])
    config = auto_config(interval=2, warmup=4, threshold=1000.0, total_steps=EPOCHS * STEPS)
    config["grad_freeze"].update(param_groups=2, payback=False, cache_frozen_prefix="auto")
    opt = freeze_optimizer(BoostConfig.from_dict(config), net, nn.Momentum(net.trainable_params(), 0.05, 0.9))
    config["grad_freeze"]["cache_frozen_prefix"] = cache  # the groups at the stages either way
    return net, BoostTrainOneStepCell(nn.WithLossCell(net, nn.MSELoss()), opt, boost_config=config)


# A step costs 1 s whole and 0.7 s with the front frozen; on the cache, 0.2 s (faster) or 0.9 s (slower).
FAST, SLOW = {0: 1.0, 1: 0.7, "cached": 0.2}, {0: 1.0, 1: 0.7, "cached": 0.9}
CASES = {  # seconds, compile seconds, what the warning says (None: none), whether the cache served steps at the end
    "pays": (FAST, 1.0, None, True),
    "fill_does_not_pay": (FAST, 1000.0, "does not start, as it would not pay", False),
    "slower_than_the_batch": (SLOW, 1.0, "does not pay on this machine", False),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_cache_judges_its_payback(mode, case):
    """Where it pays, the cache starts once the frozen level's steps on the batch are timed (4 steps), fills for an
    epoch and serves the rest; where its compiles cost more than it could save it never starts; where its steps
    measure slower than on the batch it steps aside after the A/B. One warning with the figures, naming the key; and
    every way, the weights are those of freezing without the cache (no BatchNorm: the prefix's inference and
    training modes agree)."""
    seconds, compile_seconds, warning, serving = CASES[case]
    net, cell = staged_cell()
    route = cell.level_route
    assert route.policy.cache == "auto" and route.cache is not None and route.state is None
    cell.fit_to_run(Run(None, STEPS))
    trace, caught = clocked_run(cell, shuffled_epochs(EPOCHS), seconds, compile_seconds)
    messages = [str(w.message) for w in caught]
    first_frozen = trace.index(1)
    assert trace[first_frozen:first_frozen + 4] == [1] * 4  # the level's steps on the batch are timed first
    if warning is None:
        assert messages == []
        assert route.caching and cell.prefix_cache.hits > 0 and trace[-1] == "cached"
    else:
        assert len(messages) == 1 and warning in messages[0]
        assert "'grad_freeze.cache_frozen_prefix' \"auto\"" in messages[0] and " ms" in messages[0]
        assert not route.caching and trace[-1] == 1
    assert ("cached" in trace) == (case != "fill_does_not_pay")
    assert route.caching == serving
    plain_net, plain = staged_cell(cache=False)
    plain.fit_to_run(Run(None, STEPS))
    for x, y in shuffled_epochs(EPOCHS):
        plain(x, y)
    for got, want in zip(net.trainable_params(), plain_net.trainable_params()):
        np.testing.assert_allclose(got.asnumpy(), want.asnumpy(), rtol=1e-6, atol=1e-7)


def test_augmented_samples_are_found_before_anything_is_filled(graph_mode):
    """The probe keeps the first epoch's fingerprints and, an epoch on, finds none of them again (every sample changed):
    the cache never fills, compiles nothing and says so once, before the front freezes (the probe's verdict comes at
    call STEPS + 1, the front freezes after update 4); the frozen steps run on the batch."""
    _, cell = staged_cell()
    cell.fit_to_run(Run(None, STEPS))
    trace, caught = clocked_run(cell, shuffled_epochs(EPOCHS, fresh=True), FAST, 1.0)
    messages = [str(w.message) for w in caught]
    assert len(messages) == 1 and "will not fill" in messages[0] and "only 0%" in messages[0]
    assert "cached" not in trace and trace[-1] == 1
    assert cell.prefix_cache.hits == cell.prefix_cache.misses == 0 and not cell.prefix_cache.spans


def test_without_the_epochs_length_auto_does_not_start(graph_mode):
    """Without the run's steps per epoch the cache cannot weigh its fill: on "auto" it never starts, and says so once
    naming fit_to_run."""
    _, cell = staged_cell()
    trace, caught = clocked_run(cell, shuffled_epochs(4), FAST, 1.0)
    messages = [str(w.message) for w in caught]
    assert "cached" not in trace and 1 in trace
    assert len(messages) == 1 and "cannot weigh whether it pays" in messages[0] and "fit_to_run" in messages[0]


def test_auto_applies_only_where_the_cache_can():
    """"auto" cuts the groups at stages, and the cell builds the cache, only under the automatic schedule on a
    network with at least one stage with parameters a group; elsewhere the groups are cut at layers and the cell has
    no cache, without a warning (a network without stages, too few stages, the progressive schedule)."""
    net = nn.SequentialCell([nn.Dense(4, 8), nn.Tanh(), nn.Dense(8, 8), nn.Tanh(), nn.Dense(8, 3)])
    by_stage = GradientFreeze(2, "auto", 0.7, 100, cache_frozen_prefix="auto").cache_stages(net)
    assert [len(stage) for stage in by_stage] == [2, 2, 2]
    assert GradientFreeze(4, "auto", 0.7, 100, cache_frozen_prefix="auto").cache_stages(net) is None
    assert GradientFreeze(2, 2, 0.7, 100, cache_frozen_prefix="auto").cache_stages(net) is None

    class Unstaged(nn.Cell):
        def __init__(self):
            super().__init__()
            self.first, self.second, self.out = nn.Dense(4, 8), nn.Dense(8, 8), nn.Dense(8, 3)

        def construct(self, x):
            return self.out(self.second(self.first(x)))

    unstaged = Unstaged()
    assert GradientFreeze(2, "auto", 0.7, 100, cache_frozen_prefix="auto").cache_stages(unstaged) is None
    with warnings.catch_warnings():
        warnings.simplefilter("error", BoostConfigWarning)
        config = auto_config(total_steps=40)
        config["grad_freeze"].update(param_groups=2, payback=True, cache_frozen_prefix="auto")
        cell = BoostTrainOneStepCell(nn.WithLossCell(unstaged, nn.MSELoss()),
                                     nn.Momentum(unstaged.trainable_params(), 0.1, 0.9), boost_config=config)
    assert cell.prefix_cache is None and cell.level_route is not None  # payback's route, without the cache


def test_ranks_average_only_the_figures_every_rank_knows():
    """Data-parallel, the route sums the ranks' figures and the count of ranks that know each; a figure one rank does
    not know yet (-1) stays unknown, so no rank decides from half a measurement. Stand-in: the all-reduce of 2 ranks
    is a function that adds the other rank's summary (what AllReduce's sum gives)."""
    _, cell = staged_cell()
    route, ledger = cell.level_route, cell.level_route.ledger
    for seconds in (2.0, 1.0, 1.0, 1.0):
        ledger.record(0, seconds)
    other = ledger.summary().copy()
    other[0, 0], other[1, 0] = 3.0, 1.0  # the other rank: a slower full step
    other[0, ledger.cached_row(1)] = 0.5  # and a cached step this rank has not timed
    known = np.stack([np.where(other >= 0, other, 0), other >= 0]).astype(np.float32)
    route.all_reduce, route.ranks = (lambda mine: Tensor(mine.asnumpy() + known)), 2
    summary = route._summary()  # pylint: disable=protected-access
    assert summary[0, 0] == pytest.approx(2.0) and summary[1, 0] == pytest.approx(1.0)
    assert summary[0, ledger.cached_row(1)] == -1


class Weight:  # pylint: disable=too-few-public-methods
    """A parameter's stand-in for ``stage_starts``, which reads shapes only."""

    def __init__(self, *shape):
        self.shape = shape


def test_groups_cut_at_stages_hold_their_share_of_the_layers():
    """The bench's ResNet (a stem, 6 blocks of 2 convolutions, a downsampling one entering the second and third stages,
    a dense head: 16 layers over 8 stages; BatchNorm's and biases' vectors are no layers): 3 groups start where
    the layers before them come nearest 16/3 and 32/3 (after 5 and 10 layers; a stride of stages would cut at 2
    and 4 whatever the layers), 4 groups nearest 4 (3 and 5 tie: the earlier), 8 and 12; a stage without weights
    counts as one layer, and every group keeps a stage of its own."""
    counts = [1, 2, 2, 3, 2, 3, 2, 1]
    stages = [[Weight(3, 3, 2, 2)] * count + [Weight(3)] for count in counts]
    assert stage_starts(stages, 3) == [0, 3, 5]
    assert stage_starts(stages, 4) == [0, 2, 4, 6]
    assert stage_starts([[Weight(2, 2)] * 10, [Weight(2)], [Weight(2, 2)]], 3) == [0, 1, 2]


@pytest.mark.slow  # a whole clocked run and its resumed half
def test_a_resumed_run_decides_from_the_interrupted_runs_ledger(graph_mode, tmp_path):
    """Stopped after the cache won its A/B, saved and resumed in a new cell: the cache is empty (host memory), but the
    ledger (Parameters) holds both steps, so at its first call the resumed run weighs a refill with the measured
    saving over the 20 steps left (it pays), starts it at once (no steps on the batch timed again) and keeps it
    without a second A/B; the run ends where the uninterrupted one does (no BatchNorm: cached or not, the prefix
    computes the same). With too few steps left for a refill it would not start, as the rule says."""
    batches = list(shuffled_epochs(EPOCHS))
    whole_net, whole = staged_cell()
    whole.fit_to_run(Run(None, STEPS))
    trace, _ = clocked_run(whole, batches, FAST, 1.0)
    stop = len(trace) - 5 * STEPS  # 20 steps left: a refill pays for itself again
    _, first = staged_cell()
    first.fit_to_run(Run(None, STEPS))
    first_trace, _ = clocked_run(first, batches[:stop], FAST, 1.0)
    assert first_trace == trace[:stop] and first_trace[-1] == "cached"
    assert first.level_route.state.cache == "kept"
    path = str(tmp_path / "cache.ckpt")
    ms.save_checkpoint(first, path)
    net, resumed = staged_cell()
    resumed.fit_to_run(Run(None, STEPS))
    assert not ms.load_param_into_net(resumed, ms.load_checkpoint(path))[0]
    resumed_trace, caught = clocked_run(resumed, batches[stop:], FAST, 1.0, seen={0, 1})
    assert resumed_trace == ["cached"] * (len(batches) - stop) and caught == []
    assert resumed.level_route.state.cache == "kept"
    for got, want in zip(net.trainable_params(), whole_net.trainable_params()):
        np.testing.assert_allclose(got.asnumpy(), want.asnumpy(), rtol=1e-6, atol=1e-7)


def staged_mlp():
    """tests/helpers.py's TanhMLP (its weights, its function) as 3 stages of two Dense layers, so that "auto" cuts
    its 3 groups at the stages and the cell builds the cache; the automatic schedule of tests/test_payback.py (a
    decision every 2 updates from update 3 on, a run of 200 updates) with payback. On data that repeats every
    epoch of 12 batches the front segment settles first and the middle one much later, so the front freezes group
    by group where payback allows both levels (level 1 after update 9, level 2 after update 35)."""
    dense = list(TanhMLP().layers)
    net = nn.SequentialCell([nn.SequentialCell([dense[0], nn.Tanh(), dense[1], nn.Tanh()]),
                             nn.SequentialCell([dense[2], nn.Tanh(), dense[3], nn.Tanh()]),
                             nn.SequentialCell([dense[4], nn.Tanh(), dense[5]])])
    config = auto_config(total_steps=200)
    config["grad_freeze"].update(payback=True, cache_frozen_prefix="auto")
    opt = freeze_optimizer(BoostConfig.from_dict(config), net, nn.Momentum(net.trainable_params(), 0.1, 0.9))
    return BoostTrainOneStepCell(nn.WithLossCell(net, nn.MSELoss()), opt, boost_config=config)


# Compiles of 17 s, a full step of 2 s: freezing level 1 pays (its prior saving of about 0.11 s a step over some 190
# steps) and, once level 1 measured 0.3 s saved, level 2 too; the cache's two compiles do not pay at level 1 (half of
# 0.3 s over the steps after an epoch's fill). At level 2 they pay where its step measures 1.4 s (half of 0.6 s
# saved), and not at 1.65 s.
DEEPER = {"pays_deeper": (1.4, None), "pays_nowhere": (1.65, "at frozen level 2")}


@pytest.mark.slow  # a clocked run of 48 calls per case
@pytest.mark.parametrize("case", sorted(DEEPER))
def test_a_cache_that_does_not_pay_at_the_first_level_waits_for_a_deeper_one(graph_mode, case):
    """Where the front freezes group by group, the cache that would not pay at level 1 (its forward pass there saves
    little) does not step aside while payback allows a deeper level: it weighs again at level 2, where it fills and
    serves the steps if it pays there, and otherwise steps aside with one warning giving level 2's figures."""
    level_2_seconds, warning = DEEPER[case]
    cell, epoch = staged_mlp(), 12
    cell.fit_to_run(Run(None, epoch))
    batches = [data(call % epoch) for call in range(4 * epoch)]
    trace, caught = clocked_run(cell, batches, {0: 2.0, 1: 1.7, 2: level_2_seconds, "cached": 1.1}, 17.0)
    messages = [str(w.message) for w in caught]
    first_at = {level: trace.index(level) for level in (1, 2)}
    # level 1's steps timed (4) and the probe's verdict (an epoch and 2 calls on) before level 2: the cache weighed
    assert first_at[2] > max(first_at[1] + 4, epoch + 2)
    assert trace[first_at[1]:first_at[2]] == [1] * (first_at[2] - first_at[1])  # level 1 on the batch, the cache waits
    if warning is None:
        assert messages == [] and cell.level_route.caching and trace[-1] == "cached"
    else:
        assert len(messages) == 1 and "does not start" in messages[0] and warning in messages[0]
        assert "cached" not in trace and not cell.level_route.caching
