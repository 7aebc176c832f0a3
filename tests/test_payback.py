"""Payback: the automatic schedule freezes to the levels whose compile the run's steps left repay, from
the run's own measured step and compile times, never from a constant fitted on one machine.

The rule (``boost_cells.freezing.host.payback``) against its arithmetic written out; the ledger (``CostLedger``) against
the times it was given, through a checkpoint; and the whole loop on the TanhMLP with a clock the test sets, so no
test depends on this machine's speed: where steps are dear and compiles cheap the front freezes group by group,
where a compile costs more than one group's saving it freezes the whole front at once, and where no level repays its
compile the run trains as O0 does and says so once. Each against the NumPy rendering of the schedule
(``tests/helpers.py``'s ``numpy_auto_run``) with those levels allowed; a resumed run decides as the uninterrupted one
did."""
import dataclasses

import mindspore as ms
import numpy as np
import pytest

from boost_cells import BoostTrainOneStepCell
from boost_cells.freezing.host.ledger import CostLedger, window_median
from boost_cells.freezing.host.payback import (ENTRY_MARGIN, PRIOR_SAVING, Costs, decision_estimate,
                                               decision_source, decisions_left, expected_saving, layer_shares,
                                               paying_levels)
from tests.helpers import (STEP_SECONDS, STEPS, SetClock, auto_config, clocked_run, data, mlp_setup,
                           numpy_auto_run, payback_cell, state)

SHARES = layer_shares([2, 2, 2])  # TanhMLP: two Dense layers a segment


def test_layer_shares_count_the_layers_before_each_level():
    assert SHARES == (0.0, 1 / 3, 2 / 3)
    assert layer_shares([1, 3, 4]) == (0.0, 1 / 8, 4 / 8)


def test_a_level_pays_when_the_steps_left_repay_its_compile():
    """``steps_left * (saving(k) - saving(current)) > compile(k)``: with the prior alone (saving(k) = step *
    PRIOR_SAVING * share(k)), one second a step and one second of compile, 100 steps left pay for both levels; at
    10 ms a step neither pays; a compile between the two levels' gains pays for the deeper level only."""
    costs = Costs(step={0: 1.0}, compile={0: 1.0}, shares=SHARES)
    assert expected_saving(costs, 1) == pytest.approx(PRIOR_SAVING / 3)
    assert paying_levels(costs, 0, 100) == (1, 2)
    assert paying_levels(Costs(step={0: 0.01}, compile={0: 1.0}, shares=SHARES), 0, 100) == ()
    gain1, gain2 = 100 * PRIOR_SAVING / 3, 100 * PRIOR_SAVING * 2 / 3
    between = Costs(step={0: 1.0}, compile={0: (gain1 + gain2) / 2}, shares=SHARES)
    assert paying_levels(between, 0, 100) == (2,)
    assert paying_levels(Costs(step={}, compile={}, shares=SHARES), 0, 100) == ()  # nothing measured yet


def test_a_measured_level_replaces_the_prior_and_a_compiled_one_is_paid():
    """Level 1 measured at 0.7 s against 1.0 s: its saving is 0.3 s, level 2's is scaled from it by the shares
    (0.6 s), which pays against a 2 s compile from 7 steps left where it paid before, from 9 where it did not (the
    entry margin); once level 2 compiled (a resumed run counts it compiled too) its compile costs nothing more."""
    costs = Costs(step={0: 1.0, 1: 0.7}, compile={0: 2.0, 1: 1.5}, shares=SHARES)
    assert expected_saving(costs, 1) == pytest.approx(0.3)
    assert expected_saving(costs, 2) == pytest.approx(0.6)
    assert paying_levels(costs, 1, 6, paid=(2,)) == ()  # 6 * 0.3 = 1.8 < 2.0, the largest compile measured
    assert paying_levels(costs, 1, 7, paid=(2,)) == (2,)  # 2.1 > 2.0
    assert paying_levels(costs, 1, 8) == () and paying_levels(costs, 1, 9) == (2,)  # 2.4 and 2.7 against 1.25 x 2.0
    paid = Costs(step={0: 1.0, 1: 0.7}, compile={0: 2.0, 1: 1.5, 2: 2.0}, shares=SHARES)
    assert paying_levels(paid, 1, 1) == (2,)
    noisy = Costs(step={0: 1.0, 1: 0.4}, compile={0: 2.0, 1: 1.5}, shares=SHARES)  # level 1 saved over its share
    assert expected_saving(noisy, 2) == pytest.approx(2 / 3)  # capped at the full step's share, not 1.2 s
    slower = Costs(step={0: 1.0, 1: 1.1}, compile={0: 2.0, 1: 1.0}, shares=SHARES)
    assert expected_saving(slower, 1) == pytest.approx(-0.1) and paying_levels(slower, 0, 10 ** 6) == ()


def test_every_level_must_repay_its_compile_and_the_decisions_left_too():
    """Allowing a level keeps the host route taking the schedule's decisions, one every ``decision_every`` calls, so
    a level must repay its compile and those left in the run, each at the mean measured: level 2's prior gain (11.1 s
    over 100 steps) repays 1.25 x a 5 s compile alone, not with 10 decisions of 0.5 s more (one allowed at the last
    weighing, without the entry margin, does). Before a decision was timed, or where the route takes none, none are
    counted."""
    gain = 100 * PRIOR_SAVING * 2 / 3
    dear = Costs(step={0: 1.0}, compile={0: 5.0}, shares=SHARES, decision=0.5, decision_every=10)
    assert decisions_left(dear, 100) == 10 and decisions_left(dear, 101) == 11
    assert decision_estimate(dear, 100) == 5.0 and gain > 1.25 * 5.0
    assert paying_levels(dear, 0, 100) == ()
    assert paying_levels(dear, 0, 100, paid=(2,)) == (2,)  # allowed before: 11.1 s > 5 s + 5 s, no margin
    assert paying_levels(dataclasses.replace(dear, decision=0.05), 0, 100) == (2,)  # 11.1 s > 1.25 x 5.5 s
    untimed = dataclasses.replace(dear, decision=None)
    assert decision_estimate(untimed, 100) == 0.0 and paying_levels(untimed, 0, 100) == (2,)
    assert decision_source(untimed, 100).startswith("prior:")
    assert decision_source(dear, 100).startswith("measured: 10 decisions left x 500.0 ms each")
    none = dataclasses.replace(dear, decision_every=0)
    assert decision_estimate(none, 100) == 0.0 and paying_levels(none, 0, 100) == (2,)


def test_a_level_not_allowed_before_must_repay_its_compile_by_the_entry_margin():
    """Level 2's gain (the prior: 100 steps x a ninth of a 1 s step, 11.1 s) against a compile of 10 s, 8.5 s and
    11.5 s: beyond ``1 + ENTRY_MARGIN`` times the compile a level comes, below that only one that paid at the last
    weighing (``paid``) stays, and below the compile itself none does."""
    gain = 100 * PRIOR_SAVING * 2 / 3
    for compile_seconds, new, held in ((gain / 1.1, (), (2,)), (gain / 1.3, (2,), (2,)), (gain / 0.9, (), ())):
        costs = Costs(step={0: 1.0}, compile={0: compile_seconds}, shares=SHARES)
        assert paying_levels(costs, 0, 100) == new, compile_seconds
        assert paying_levels(costs, 0, 100, paid=(2,)) == held, compile_seconds
    assert ENTRY_MARGIN == pytest.approx(0.25)


def test_the_ledger_keeps_each_levels_first_step_and_median(tmp_path):
    """The first step at a level is its compile and a step; then the median of the last WINDOW steps; a
    checkpoint holds it all, and a ledger loaded from it summarises the same."""
    ledger = CostLedger(3)
    for seconds in (3.0, 1.0, 1.2, 0.9, 5.0):  # level 0: first step 3 s; then 4 steps, one of them an outlier
        ledger.record(0, seconds)
    ledger.record(1, 2.0)
    summary = ledger.summary()[:, :3]  # the levels on the batch; the cached rows (nothing recorded) are unknown
    assert (ledger.summary()[:, 3:] == -1).all()
    np.testing.assert_allclose(summary[0], [np.median([1.0, 1.2, 0.9, 5.0]), -1, -1])
    np.testing.assert_allclose(summary[1], [3.0 - 1.1, 2.0, -1])  # level 1: first step only, its median unknown
    for seconds in np.arange(CostLedger.WINDOW + 4, dtype=np.float32):  # the window keeps the last WINDOW
        ledger.record(2, float(seconds))
    assert ledger.summary()[0][2] == np.median(np.arange(4, CostLedger.WINDOW + 4))
    for seconds in (2.0, 0.5, 0.25, 0.5, 0.75):  # level 1's steps on the cache: its own row
        ledger.record(ledger.cached_row(1), seconds)
    costs = ledger.costs(ledger.summary(), SHARES)
    assert costs.cached_step == {1: 0.5} and sorted(costs.step) == [0, 2]
    path = str(tmp_path / "ledger.ckpt")
    ledger.sync()  # the host mirror into the Parameters, as the route does at each weighing
    ms.save_checkpoint(ledger, path)
    loaded = CostLedger(3)
    assert not ms.load_param_into_net(loaded, ms.load_checkpoint(path))[0]
    np.testing.assert_array_equal(loaded.summary(), ledger.summary())


def test_the_ledger_keeps_what_one_write_a_step_would_have_kept():
    """The ledger keeps the steps a call records in a list and folds them into its arrays when read; whenever it is
    read, its arrays are those of the NumPy ring buffer written one step at a time: each row's first step, then
    its last WINDOW steps at column ``n % WINDOW``, and their count. Rows interleave, and a fold may hold more than
    a window of one row's steps."""
    rows, window = 4, CostLedger.WINDOW
    first, steps, timed = -np.ones(rows, np.float32), np.zeros((rows, window), np.float32), np.zeros(rows, np.int32)
    ledger = CostLedger(rows // 2)
    rng = np.random.default_rng(0)
    for read_after in rng.integers(0, 3 * window, 12):
        for _ in range(read_after):
            row, seconds = int(rng.integers(0, rows)), float(rng.random())
            ledger.record(row, seconds)
            if first[row] < 0:
                first[row] = seconds
            else:
                steps[row, timed[row] % window] = seconds
                timed[row] += 1
        table = ledger._table()  # pylint: disable=protected-access
        np.testing.assert_array_equal(table["first_step"], first)
        np.testing.assert_array_equal(table["steps"], steps)
        np.testing.assert_array_equal(table["timed"], timed)
    ledger.sync()
    np.testing.assert_array_equal(ledger.steps.asnumpy(), steps)
    np.testing.assert_array_equal(ledger.timed.asnumpy(), timed)


def test_the_ledger_summary_is_the_numpy_reference():
    """The summary, bit for bit, against its NumPy rendering: each row's ``np.median`` of its last
    ``min(timed, WINDOW)`` steps once ``MIN_TIMED`` are timed (-1 before), and its compile, the first step less that
    median (at least 0; the whole first step while the median is unknown; -1 before any step), all float32; rows
    timed from none to more than a window, times across four orders of magnitude, so the window's even and odd
    lengths and its wrap are all met; then the decisions' mean seconds after the first (float32 sum over count; -1
    before a second), from none to a few."""
    rng = np.random.default_rng(3)
    for _ in range(200):
        ledger = CostLedger(3)
        for row in range(6):
            for _ in range(int(rng.integers(0, 2 * CostLedger.WINDOW + 3))):
                ledger.record(row, float(rng.random() * 10.0 ** rng.uniform(-4, 0)))
        decisions = rng.random(int(rng.integers(0, 5))) * 0.1
        for seconds in decisions:
            ledger.record_decision(float(seconds))
        table = ledger._table()  # pylint: disable=protected-access
        first, timed, steps = table["first_step"], table["timed"], table["steps"]
        median = np.array([np.median(steps[k, :min(timed[k], CostLedger.WINDOW)])
                           if timed[k] >= CostLedger.MIN_TIMED else -1.0 for k in range(6)], np.float32)
        compile_seconds = np.where(first < 0, -1.0, np.maximum(0.0, first - np.maximum(median, 0.0)))
        total = np.float32(0)
        for seconds in decisions[1:]:
            total += np.float32(seconds)
        decision = total / np.float32(len(decisions) - 1) if len(decisions) > 1 else -1.0
        expected = np.stack([np.append(median, decision), np.append(compile_seconds, -1.0)]).astype(np.float32)
        assert ledger.summary().tobytes() == expected.tobytes()
        costs = ledger.costs(ledger.summary(), SHARES, decision_every=7)
        assert costs.decision == (None if decision == -1.0 else pytest.approx(float(decision)))
        assert costs.decision_every == 7 and sorted(costs.step) == [k for k in range(3) if median[k] >= 0]


def test_the_window_median_is_numpys_median_bit_for_bit():
    """``window_median`` of a float32 window of 1 to WINDOW values is ``np.median``'s float32, bit for bit."""
    rng = np.random.default_rng(4)
    for count in range(1, CostLedger.WINDOW + 1):
        for _ in range(300):
            values = (rng.random(count) * 10.0 ** rng.uniform(-4, 1, count)).astype(np.float32)
            got, expected = window_median(values), np.median(values)
            assert got.dtype == expected.dtype == np.float32 and got.tobytes() == expected.tobytes()


# One second a step at level 0, 0.7 s at level 1, 0.4 s at level 2 (STEP_SECONDS); the compile decides.
# The full step is known after its first call and MIN_TIMED more, at the start of the next: the decision of that
# call's update is the first that may freeze to a level that pays.
ALLOWED_FROM = CostLedger.MIN_TIMED + 2
CASES = {
    # about 185 steps left when the front settles: level 1's prior gain is about 10 s, level 2's 20 s
    "group_by_group": (1.0, (1, 2), None),  # the front segment after update 9, the middle after 17
    "one_level": (15.0, (2,), None),
    "none": (100.0, (), "does not pay"),
}


@pytest.mark.slow  # a clocked run per case
@pytest.mark.parametrize("case", sorted(CASES))
def test_the_run_freezes_to_the_levels_that_pay(mode, case):
    """With the clock set so that compiles are cheap, dear, or dearer than any saving, the schedule freezes group by
    group (the front segment after update 9, the middle after 17), the whole front at once after update 17, or
    never (one warning naming the key, the weights those of training every group), in both modes, exactly where the
    NumPy rendering with those levels allowed does, and to the same weights."""
    compile_seconds, allowed, warning = CASES[case]
    net, cell = payback_cell()
    assert cell.level_route is not None and cell.host_hooks == (cell.level_route,)
    batches = [data(step) for step in range(STEPS)]
    expected_trace, expected = numpy_auto_run(net, batches, allowed=allowed, allowed_from=ALLOWED_FROM, skips=True)
    trace, caught = clocked_run(cell, batches, STEP_SECONDS, compile_seconds)
    assert trace == expected_trace
    assert sorted(set(trace)) == [0, *allowed]
    for got, want in zip(net.trainable_params(), expected):
        np.testing.assert_allclose(got.asnumpy(), want, rtol=2e-5, atol=1e-5)
    messages = [str(w.message) for w in caught]
    if warning is None:
        assert messages == []
    else:
        assert len(messages) == 1 and warning in messages[0] and "'grad_freeze.payback'" in messages[0]


@pytest.mark.slow  # a whole clocked run and its resumed half
def test_a_resumed_run_decides_as_the_uninterrupted_one(graph_mode, tmp_path):
    """Stopped after 12 steps (level 1 frozen and measured, level 2 not yet), saved and resumed in a new cell from the
    checkpoint, the run allows and freezes exactly as the uninterrupted one and ends bit-identical: the ledger is
    Parameters, and the levels compiled before count as paid."""
    batches = [data(step) for step in range(STEPS)]
    _, whole = payback_cell()
    trace, _ = clocked_run(whole, batches, STEP_SECONDS, 1.0)
    assert trace.index(1) == 9 and trace.index(2) == 17
    _, first = payback_cell()
    clock = SetClock()
    first_trace, _ = clocked_run(first, batches[:12], STEP_SECONDS, 1.0, clock)
    path = str(tmp_path / "payback.ckpt")
    ms.save_checkpoint(first, path)
    _, resumed = payback_cell()
    assert not ms.load_param_into_net(resumed, ms.load_checkpoint(path))[0]
    resumed_trace, _ = clocked_run(resumed, batches[12:], STEP_SECONDS, 1.0, clock, seen=set(first_trace))
    assert first_trace + resumed_trace == trace
    final, expected = state(resumed), state(whole)
    assert sorted(final) == sorted(expected)
    for name, value in expected.items():
        if "ledger" not in name:  # the resumed ledger timed the step that resumed as a step, the whole one did not
            assert np.array_equal(value, final[name]), name


def test_the_route_touches_the_device_only_at_its_weighings_and_decisions(graph_mode, monkeypatch):
    """The route costs a step nothing a plain step does not: its ledger records into a host mirror and its level is
    a host mirror too, so in GRAPH_MODE a call reads (``Tensor.asnumpy``) or writes (``Parameter.set_data``) the
    device only where the route weighs the levels (every 4 calls here: half the decision interval of 8 updates) or
    where a call applied a decision's update (the route reads the updates and takes the schedule's decision, and its
    level is read at the next call, which is a weighing here); every other call touches nothing, and the run still
    freezes. The route's ``level`` (the level each call ran at) is read from the host mirror after every call, inside
    the count, and follows the schedule's level."""
    _, net_with_loss, opt = mlp_setup()
    config = auto_config(interval=8, warmup=8, total_steps=200, threshold=1000.0)
    config["grad_freeze"]["payback"] = True
    cell = BoostTrainOneStepCell(net_with_loss, opt, boost_config=config)
    route, touched, levels, clock = cell.level_route, [], [], SetClock()
    route.ledger.clock = clock  # a second a call: every level pays (no compile measured beyond a step)
    assert route.cadence == 4
    counting = {"calls": 0}
    asnumpy, set_data = ms.Tensor.asnumpy, ms.Parameter.set_data

    def read(tensor):
        counting["calls"] += 1
        return asnumpy(tensor)

    def write(parameter, *args, **kwargs):
        counting["calls"] += 1
        return set_data(parameter, *args, **kwargs)

    monkeypatch.setattr(ms.Tensor, "asnumpy", read)
    monkeypatch.setattr(ms.Parameter, "set_data", write)
    calls = 64
    for step in range(calls):
        before = counting["calls"]
        cell(*data(step))
        clock.now += 1.0
        levels.append(route.level)
        touched.append(counting["calls"] > before)
    monkeypatch.undo()
    weighings = set(range(0, calls, route.cadence))
    decisions = {step for step in range(calls) if step % 8 == 7}  # the calls that apply updates 8, 16, ...
    assert all(step in weighings | decisions for step, touch in enumerate(touched) if touch)
    assert sum(touched) <= len(weighings) + len(decisions) + 1 and cell.train_step.frozen_for_good() > 0
    assert levels == sorted(levels) and levels[0] == 0
    cell(*data(calls))
    assert route.level == cell.train_step.frozen_for_good()
