"""The decision records: every freezing decision that changes anything is one ``Decision`` (what, when, why, from
which figures, each marked measured, config, estimate or prior), listed by the train cell's ``decisions``, logged
once, and held by a checkpoint. Driven with clocks and costs the tests set, each decision both ways."""
import dataclasses
import json
import logging

import mindspore as ms
import numpy as np
import pytest

from boost_cells import Run
from boost_cells.freezing.host.decisions import Decision, DecisionLog, Figure
from boost_cells.freezing.host.payback import Costs, layer_shares
from boost_cells.freezing.schedule.plan import FreezePlan, auto_criterion
from boost_cells.freezing.host.policy import FreezingPolicy, Observation, PolicyRecord, PolicyState
from tests.helpers import STEP_SECONDS, STEPS, SetClock, clocked_run, data, payback_cell


def lines(decisions):
    return [decision.line() for decision in decisions]


@pytest.mark.slow  # a clocked run per case
@pytest.mark.parametrize("compile_seconds", [1.0, 100.0])
def test_payback_and_the_schedule_say_what_they_decided(graph_mode, compile_seconds, caplog):
    """Where compiles are cheap, payback allows both levels (from the prior, and says so) and the schedule records
    each freeze at the update it froze, with each segment's displacement and the threshold from the config; where no
    level repays its compile, one record says so with the measured step. Each decision is logged once, and the
    monitor's features carry the deepest level allowed."""
    _, cell = payback_cell()
    batches = [data(step) for step in range(STEPS)]
    with caplog.at_level(logging.INFO, logger="boost_cells.decisions"):
        trace, _ = clocked_run(cell, batches, STEP_SECONDS, compile_seconds)
    decisions = cell.decisions
    assert [decision.update for decision in decisions] == sorted(decision.update for decision in decisions)
    logged = [record.getMessage() for record in caplog.records]
    features = {name: value for _, part in cell.cells_and_names() if hasattr(part, "monitor_state")
                for name, value in part.monitor_state().items()}
    assert features["freeze_allowed"] == (2 if compile_seconds == 1.0 else 0)  # what BoostMonitor records
    if compile_seconds == 1.0:
        froze = [decision for decision in decisions if decision.part == "schedule"]
        assert [(decision.action, decision.update) for decision in froze] == [("froze level 1", trace.index(1)),
                                                                              ("froze level 2", trace.index(2))]
        assert "segment 0 settled" in froze[0].reason and "segments 0-1 settled" in froze[1].reason
        figures = {figure.name: figure for figure in froze[0].figures}
        assert figures["auto_threshold"].source == "config" and figures["displacement of segment 0"].value < 2.6
        allowed = next(decision for decision in decisions if decision.part == "payback")
        assert allowed.action == "allowed levels 1, 2" and allowed.update < trace.index(1)
        saving = next(figure for figure in allowed.figures if "saving" in figure.name)
        assert saving.source.startswith("prior: PRIOR_SAVING")
        assert lines(decisions) == sorted(logged, key=lines(decisions).index)  # each logged, once
        assert len(logged) == len(decisions)
    else:
        assert [decision.action for decision in decisions] == ["no level pays"]
        figures = {figure.name: figure for figure in decisions[0].figures}
        assert figures["full step"].value == pytest.approx(1000.0) and figures["full step"].source == "measured"
        assert logged == lines(decisions)


@pytest.mark.slow  # a clocked run
def test_the_prior_on_a_launch_bound_shape_is_said_to_be_a_prior(graph_mode):
    """Where launches dominate, a frozen level saves almost nothing (0.99 s against 1.0 s a step), but before any
    frozen level ran only the prior speaks: a sixth of the full step a share of layers, which pays level 1's compile
    of 5 s here. The record of that decision names it a prior; once level 1 measured its 10 ms, payback says no
    deeper level pays, from level 1's measured saving, and level 2 never compiles."""
    _, cell = payback_cell()
    trace, _ = clocked_run(cell, [data(step) for step in range(STEPS)], {0: 1.0, 1: 0.99, 2: 0.98}, 5.0)
    payback = [decision for decision in cell.decisions if decision.part == "payback"]
    assert [decision.action for decision in payback] == ["allowed levels 1, 2", "allowed no deeper level"]
    sources = [next(f.source for f in decision.figures if "saving" in f.name) for decision in payback]
    assert sources[0].startswith("prior:") and sources[1].startswith("estimate: level 1's measured saving")
    assert 1 in trace and 2 not in trace
    host_work = [next(f for f in decision.figures if f.name == "the decisions' host work") for decision in payback]
    assert host_work[0].source.startswith("prior: none counted") and host_work[0].value == 0.0
    assert host_work[1].source.startswith("measured: ") and " decisions left x 0.0 ms each" in host_work[1].source


@pytest.mark.slow  # a clocked run
def test_decisions_too_dear_to_take_stop_the_levels_they_serve(graph_mode):
    """Each of the schedule's decisions costs the route 2 s here (the clock moves while it decides). At first none
    is timed, so payback allows both levels on its compile alone and says the decisions' cost is a prior, and it
    still does after the first decision (which holds what runs once); the route takes the next one and times it,
    and at the next weighing the decisions left (one every 2 updates, about a hundred) outweigh any level's saving:
    payback allows no deeper level, naming the measured figure, the route takes no more decisions, one warning says
    no level pays, and nothing freezes."""
    _, cell = payback_cell()
    clock, schedule = SetClock(), cell.level_route.schedule
    decide = schedule.decide_now

    def dear_decision():
        clock.now += 2.0
        return decide()

    schedule.decide_now = dear_decision
    trace, caught = clocked_run(cell, [data(step) for step in range(STEPS)], STEP_SECONDS, 1.0, clock)
    assert set(trace) == {0}
    payback = [decision for decision in cell.decisions if decision.part == "payback"]
    assert [decision.action for decision in payback] == ["allowed levels 1, 2", "allowed no deeper level",
                                                         "no level pays"]
    host_work = [next(f for f in decision.figures if f.name == "the decisions' host work") for decision in payback]
    assert host_work[0].source.startswith("prior:")
    assert "decisions left x 2000.0 ms each (the mean after the first)" in host_work[1].source
    assert host_work[1].value > 100.0
    assert cell.level_route.ledger.decisions.asnumpy().tolist() == [2.0, 2.0, 1.0]  # two taken, of 2 s each
    assert len(caught) == 1 and "the decisions' host work about" in str(caught[0].message)


@pytest.mark.slow  # a clocked run and its resumed half
@pytest.mark.parametrize("compile_seconds", [1.0, 100.0])
def test_a_resumed_run_lists_what_the_interrupted_one_decided(graph_mode, tmp_path, compile_seconds):
    """The checkpoint holds the decisions (the schedule's in its Parameters, the route's as JSON in
    ``grad_freeze.decision_log``) and the policy's state (``grad_freeze.policy_state``): a cell loaded from it lists
    the interrupted run's decisions before its first step, and the resumed run ends with the uninterrupted run's
    decisions, none made twice: where levels pay, and where none does (said once, by the interrupted run)."""
    batches = [data(step) for step in range(STEPS)]
    _, whole = payback_cell()
    clocked_run(whole, batches, STEP_SECONDS, compile_seconds)
    _, first = payback_cell()
    clock = SetClock()
    first_trace, _ = clocked_run(first, batches[:12], STEP_SECONDS, compile_seconds, clock)
    path = str(tmp_path / "decisions.ckpt")
    ms.save_checkpoint(first, path)
    assert "grad_freeze.decision_log" in ms.load_checkpoint(path)
    _, resumed = payback_cell()
    assert not ms.load_param_into_net(resumed, ms.load_checkpoint(path))[0]
    assert lines(resumed.decisions) == lines(first.decisions) and first.decisions
    _, warned = clocked_run(resumed, batches[12:], STEP_SECONDS, compile_seconds, clock, seen=set(first_trace))
    assert lines(resumed.decisions) == lines(whole.decisions)
    assert "grad_freeze.policy_state" in ms.load_checkpoint(path) and warned == []
    assert ("no level pays" in [decision.action for decision in first.decisions]) == (compile_seconds == 100.0)


def cache_policy():
    """The policy over 3 levels with payback and the cache on "auto", an epoch of 12 steps, 40 updates in the run."""
    policy = FreezingPolicy(3, payback=True, cache="auto")
    plan = FreezePlan("auto", 3, 40, criterion=auto_criterion(40, 0.05, 0.1, 0.4))
    return policy, policy.init(plan, Run(None, 12))


def ask(policy, state, costs, level, steps_left):
    """The policy's answer at ``steps_left`` steps left of 40, the samples repeating (the probe's verdict)."""
    return policy.update(state, Observation(40 - steps_left, level, costs, repeats=True))


# Level 1 measured: 1.0 s a full step, 0.7 s frozen; 2 s compiles; the cache at level 1 would save 0.15 s a step (the
# prior: half the level's 0.3 s), at level 2 0.3 s. An epoch is 12 steps.
COSTS = Costs(step={0: 1.0, 1: 0.7}, compile={0: 2.0, 1: 1.0}, shares=layer_shares([1, 1, 1]))


def test_a_wait_for_a_deeper_level_has_a_deadline():
    """At level 1 the fill does not pay in 30 steps (18 x 0.15 s < 4 s), but at level 2, which payback allows (30
    steps x 0.3 s > 2 s), it would while more than 12 + 4 / 0.3 = 25.3 steps are left: the cache waits, recording its
    deadline once; if level 2 comes in time it fills there (recorded); if not, at the deadline it drops, saying that
    it waited and why, with a warning."""
    policy, state = cache_policy()
    state, decisions = ask(policy, state, COSTS, 1, 30)
    assert state.allowed == (0, 1, 2) and state.cache == "waiting"
    assert [decision.action for decision in decisions] == ["allowed level 2", "cache: wait"]
    assert "until 25 steps are left" in decisions[1].reason and decisions[1].update == 10
    state, decisions = ask(policy, state, COSTS, 1, 28)
    assert decisions == () and state.cache == "waiting"
    measured = Costs(step={0: 1.0, 1: 0.7, 2: 0.4}, compile={0: 2.0, 1: 1.0, 2: 1.0}, shares=COSTS.shares)
    filled, decisions = ask(policy, state, measured, 2, 27)
    assert filled.serving and [decision.action for decision in decisions] == ["cache: fill"]
    late, decisions = ask(policy, state, COSTS, 1, 25)
    assert late.cache == "dropped" and [decision.action for decision in decisions] == ["cache: drop"]
    assert "waited at frozen level 1" in decisions[0].reason and "level 2 did not come" in decisions[0].reason
    assert decisions[0].warned


def test_a_level_near_break_even_does_not_come_and_go_with_the_measured_step():
    """Weighings whose full step moves level 2's gain (the prior, a ninth of the step over the steps left) to 1.1,
    0.95, 1.1, 1.3, 1.1, 0.95 and 1.2 times its 1 s compile: it is allowed only at the 1.3 (beyond ``ENTRY_MARGIN``,
    and its record says so), stays at the 1.1 after it and goes at the 0.95. Two decisions, where a rule without the
    margin would take five, one at each crossing of 1.0."""
    policy = FreezingPolicy(3, payback=True, cache=False)
    state = policy.init(FreezePlan("auto", 3, 1000, criterion=auto_criterion(1000, 0.05, 0.1, 0.4)), Run(None, 12))
    actions, allowed = [], []
    for updates, ratio in zip(range(10, 80, 10), (1.1, 0.95, 1.1, 1.3, 1.1, 0.95, 1.2)):
        step = ratio * 9 / (1000 - updates)  # gain = (1000 - updates) * step / 9 = ratio x the 1 s compile
        costs = Costs(step={0: step}, compile={0: 1.0}, shares=layer_shares([1, 1, 1]))
        state, decisions = policy.update(state, Observation(updates, 0, costs))
        actions += [(updates, decision.action) for decision in decisions if decision.action.startswith("allowed")]
        allowed.append(max(state.allowed))
        if updates == 40:
            assert "1.25 x its compile of about 1.00 s (ENTRY_MARGIN" in decisions[0].reason
        if updates == 60:  # level 2 failed the compile, level 1 (never allowed) the margin
            assert "repays its compile (a level allowed before) or 1.25 x its compile" in decisions[0].reason
    assert actions == [(40, "allowed level 2"), (60, "allowed no deeper level")]
    assert allowed == [0, 0, 0, 2, 2, 0, 0]


def test_the_cache_keeps_its_steps_where_they_beat_the_batch_and_says_so():
    """After its fill the A/B: cached steps faster than the level's steps on the batch are kept (recorded, with both
    measured steps); slower ones drop the cache, with a warning."""
    for cached, kept in ((0.2, True), (0.9, False)):
        policy, state = cache_policy()
        state = dataclasses.replace(state, cache="filling")
        costs = Costs(step={0: 1.0, 1: 0.7}, compile={0: 2.0}, shares=COSTS.shares, cached_step={1: cached})
        state, decisions = policy.update(state, Observation(0, 1, costs, repeats=True))
        cache = [decision for decision in decisions if decision.part == "cache"]
        assert state.cache == ("kept" if kept else "dropped")
        assert [(decision.action, decision.warned) for decision in cache] == [
            ("cache: keep", False) if kept else ("cache: drop", True)]


def test_the_policy_is_pure_and_its_record_resumes_it():
    """``update`` leaves the state it was given as it was, and the same state and observation give the same answer;
    the record a checkpoint holds (``to_dict``, through JSON) resumes the decided fields into a new run's state, a
    cache that served being weighed again (its rows are not checkpointed)."""
    policy, start = cache_policy()
    state, decisions = ask(policy, start, COSTS, 1, 30)
    assert start == cache_policy()[1] and ask(policy, start, COSTS, 1, 30) == (state, decisions)
    record = json.loads(json.dumps(state.to_dict()))
    resumed = cache_policy()[1].resumed(record)
    assert resumed == state
    served = cache_policy()[1].resumed({**record, "cache": "kept"})
    assert served.cache == "undecided" and served.waited == (1,)
    aside, decisions = policy.update(state, Observation(12, 1, aside="no host between steps"))
    assert aside.allowed == (2,) and aside.cache == "dropped"
    assert [(decision.action, decision.warned) for decision in decisions] == [("cache: drop", True),
                                                                             ("stepped aside", False)]


def test_the_policys_record_holds_every_level_a_plan_can_have():
    """The checkpointed record grows with the levels: a state with every figure of 64 levels measured (full-precision
    floats) fits, and reads back as written."""
    levels = 64
    figures = {level: 1 / (level + 3) for level in range(levels)}
    costs = Costs(step=figures, compile=figures, shares=tuple(figures.values()), cached_step=figures)
    state = PolicyState(level=3, allowed=tuple(range(levels)), paying=tuple(range(4, levels)), cache="waiting",
                        waited=tuple(range(levels)), costs=costs)
    record = PolicyRecord(levels)
    record.write(state.to_dict())
    assert PolicyState(cache="undecided").resumed(record.read()) == state


def test_a_decision_reads_as_one_line_and_round_trips():
    decision = Decision(131, "schedule", "froze level 2", "segments 0-1 settled",
                        (Figure("displacement of segment 0", 0.412, "per 100 updates"),
                         Figure("auto_threshold", 0.6, "per 100 updates", "config")), 528)
    assert decision.line() == ("update 131 of 528: froze level 2: segments 0-1 settled [displacement of segment 0 "
                               "0.412 per 100 updates (measured); auto_threshold 0.6 per 100 updates (config)]")
    assert Decision.from_dict(decision.to_dict()) == decision
    assert Figure("full step", 1334.6, "ms").text() == "full step 1,335 ms (measured)"  # never 1.33e+03


def test_the_decision_log_keeps_the_latest_where_it_is_full():
    """The checkpointed log is a fixed number of bytes; where the decisions outgrow it, the oldest give way."""
    log = DecisionLog(capacity=400)
    for update in range(6):
        log.add(Decision(update, "payback", "allowed level 1", "x" * 20))
    log.sync()
    stored = bytes(log.stored.asnumpy()).rstrip(b"\0")
    assert len(stored) <= 400
    reloaded = DecisionLog(capacity=400)
    reloaded.stored.set_data(log.stored.value())
    reloaded.load()
    updates = [decision.update for decision in reloaded.records]
    assert updates == list(range(6 - len(updates), 6)) and 0 < len(updates) < 6
    assert np.frombuffer(stored, np.uint8).size == len(stored)
