"""The decision records: every freezing decision that changes anything is one ``Decision`` (what, when, why, from
which figures, each marked measured, config, estimate or prior), listed by the train cell's ``decisions``, logged
once, and held by a checkpoint. Driven with clocks and costs the tests set, each decision both ways."""
import logging

import mindspore as ms
import numpy as np
import pytest

from boost_cells.freezing.cache_judge import CacheJudge
from boost_cells.freezing.decisions import Decision, DecisionLog, Figure
from boost_cells.freezing.payback import Costs, layer_shares
from tests.helpers import STEP_SECONDS, STEPS, SetClock, clocked_run, data, payback_cell


def lines(decisions):
    return [decision.line() for decision in decisions]


@pytest.mark.slow  # a clocked run per case
@pytest.mark.parametrize("compile_seconds", [1.0, 100.0])
def test_payback_and_the_schedule_say_what_they_decided(graph_mode, compile_seconds, caplog):
    """Where compiles are cheap, payback allows both levels (from the prior, and says so) and the schedule records
    each freeze at the update it froze, with each segment's displacement and the threshold from the config; where no
    level repays its compile, one record says so with the measured step. Each decision is logged once."""
    _, cell = payback_cell()
    batches = [data(step) for step in range(STEPS)]
    with caplog.at_level(logging.INFO, logger="boost_cells.decisions"):
        trace, _ = clocked_run(cell, batches, STEP_SECONDS, compile_seconds)
    decisions = cell.decisions
    assert [decision.update for decision in decisions] == sorted(decision.update for decision in decisions)
    logged = [record.getMessage() for record in caplog.records]
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
    frozen level ran only the prior speaks: a third of the full step a share of layers, which pays level 1's compile
    of 10 s here. The record of that decision names it a prior; once level 1 measured its 10 ms, payback says no
    deeper level pays, from level 1's measured saving, and level 2 never compiles."""
    _, cell = payback_cell()
    trace, _ = clocked_run(cell, [data(step) for step in range(STEPS)], {0: 1.0, 1: 0.99, 2: 0.98}, 10.0)
    payback = [decision for decision in cell.decisions if decision.part == "payback"]
    assert [decision.action for decision in payback] == ["allowed levels 1, 2", "allowed no deeper level"]
    sources = [next(f.source for f in decision.figures if "saving" in f.name) for decision in payback]
    assert sources[0].startswith("prior:") and sources[1].startswith("estimate: level 1's measured saving")
    assert 1 in trace and 2 not in trace


@pytest.mark.slow  # a clocked run and its resumed half
def test_a_resumed_run_lists_what_the_interrupted_one_decided(graph_mode, tmp_path):
    """The checkpoint holds the decisions (the schedule's in its Parameters, the route's as JSON in
    ``grad_freeze.decision_log``): a cell loaded from it lists the interrupted run's decisions before its first step,
    and the resumed run ends with the uninterrupted run's decisions."""
    batches = [data(step) for step in range(STEPS)]
    _, whole = payback_cell()
    clocked_run(whole, batches, STEP_SECONDS, 1.0)
    _, first = payback_cell()
    clock = SetClock()
    first_trace, _ = clocked_run(first, batches[:12], STEP_SECONDS, 1.0, clock)
    path = str(tmp_path / "decisions.ckpt")
    ms.save_checkpoint(first, path)
    assert "grad_freeze.decision_log" in ms.load_checkpoint(path)
    _, resumed = payback_cell()
    assert not ms.load_param_into_net(resumed, ms.load_checkpoint(path))[0]
    assert lines(resumed.decisions) == lines(first.decisions) and len(first.decisions) >= 2
    clocked_run(resumed, batches[12:], STEP_SECONDS, 1.0, clock, seen=set(first_trace))
    assert lines(resumed.decisions) == lines(whole.decisions)


class Ranks:
    """No cache rows are read by ``CacheJudge.weigh``; a stand-in for the cache."""


def judge_with(records):
    judge = CacheJudge(Ranks(), payback=True, record=lambda *decision: records.append(decision))
    judge.repeats = True  # the probe's verdict: the samples repeat
    return judge


# Level 1 measured: 1.0 s a full step, 0.7 s frozen; 2 s compiles; the cache at level 1 would save 0.15 s a step (the
# prior: half the level's 0.3 s), at level 2 0.3 s. An epoch is 12 steps.
COSTS = Costs(step={0: 1.0, 1: 0.7}, compile={0: 2.0, 1: 1.0}, shares=layer_shares([1, 1, 1]))


def test_a_wait_for_a_deeper_level_has_a_deadline():
    """At level 1 the fill does not pay in 30 steps (18 x 0.15 s < 4 s), but at level 2 it would while more than
    12 + 4 / 0.3 = 25.3 steps are left: the cache waits, recording its deadline once; if level 2 comes in time it
    fills there (recorded); if not, at the deadline it steps aside, saying that it waited and why."""
    records = []
    judge = judge_with(records)
    assert judge.weigh(COSTS, 1, 30, 12, deeper=2) is None
    assert judge.weigh(COSTS, 1, 28, 12, deeper=2) is None
    assert [action for _, action, _, _ in records] == ["cache: wait"]
    assert "until 25 steps are left" in records[0][2]
    measured = Costs(step={0: 1.0, 1: 0.7, 2: 0.4}, compile=COSTS.compile, shares=COSTS.shares)
    assert judge.weigh(measured, 2, 27, 12) is None and judge.started
    assert records[-1][1] == "cache: fill"
    late = judge_with([])
    assert late.weigh(COSTS, 1, 30, 12, deeper=2) is None
    why = late.weigh(COSTS, 1, 25, 12, deeper=2)
    assert "waited at frozen level 1" in why and "level 2 did not come" in why and not late.started


def test_the_cache_keeps_its_steps_where_they_beat_the_batch_and_says_so():
    """After its fill the A/B: cached steps faster than the level's steps on the batch are kept (recorded, with both
    measured steps); slower ones are the reason to step aside."""
    for cached, kept in ((0.2, True), (0.9, False)):
        records = []
        judge = judge_with(records)
        judge.started = True
        costs = Costs(step={0: 1.0, 1: 0.7}, compile={0: 2.0}, shares=COSTS.shares, cached_step={1: cached})
        why = judge.weigh(costs, 1, 100, 12)
        assert (why is None) == kept and judge.compared
        assert [action for _, action, _, _ in records] == (["cache: keep"] if kept else [])


def test_a_decision_reads_as_one_line_and_round_trips():
    decision = Decision(131, "schedule", "froze level 2", "segments 0-1 settled",
                        (Figure("displacement of segment 0", 0.412, "per 100 updates"),
                         Figure("auto_threshold", 0.6, "per 100 updates", "config")), 528)
    assert decision.line() == ("update 131 of 528: froze level 2: segments 0-1 settled [displacement of segment 0 "
                               "0.412 per 100 updates (measured); auto_threshold 0.6 per 100 updates (config)]")
    assert Decision.from_dict(decision.to_dict()) == decision


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
