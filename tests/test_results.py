"""Benchmark results as data (bench/results.py): a run's record from the benchmark's measures, per seed; a file is
written once and never overwritten; the test loss against a NumPy reference; decision records read where a train
cell keeps them and [] where not; and every committed file has the fields the results page reads, its per-round
ratios agreeing with its ratio (a transcription slip fails here)."""
import json
import sys

import numpy as np
import pytest

from tests.helpers import SetClock
from tests.launch import ROOT

sys.path.insert(0, str(ROOT / "bench"))
import results  # noqa: E402  pylint: disable=wrong-import-position


def measures(images_per_second, accuracy, test_loss, step=0.05, compile_seconds=2.0, **extra):
    """An arm's measures as ``o1_speedup.train_arm`` gives them (the fields a record reads)."""
    return {"end_to_end": images_per_second, "accuracy": accuracy, "test_loss": test_loss,
            "median_level0_step": step, "first_step": compile_seconds, **extra}


ROUNDS = [{"O0": measures(100.0, 0.98, 0.10, step=0.050, compile_seconds=2.0),
           "O1": measures(150.0, 0.97, 0.12, first_update_at_level={2: 131}, cache_hits=10, cache_misses=2,
                          decisions=[{"what": "froze level 2"}])},
          {"O0": measures(100.0, 0.99, 0.08, step=0.070, compile_seconds=3.0),
           "O1": measures(120.0, 0.99, 0.08, first_update_at_level={1: 105, 2: 157})}]


def test_a_run_record_gives_each_seed_its_ratio_accuracy_loss_freeze_and_cache():
    record = results.run_record("bench/o1_speedup.py", "python bench/o1_speedup.py --workload launch", ROOT,
                                "launch", 12, 1, ROUNDS, "O0", ["O1"], first_seed=3)
    assert record["schema"] == results.SCHEMA and record["machine"]["cores"] >= 1
    assert record["balance"] == {"o0_step_ms": pytest.approx(60.0), "first_compile_s": pytest.approx(2.5)}
    (comparison,) = record["comparisons"]
    first, second = comparison["seeds"]
    assert (first["seed"], second["seed"]) == (3, 4)
    assert first["ratio"] == pytest.approx(1.5) and second["ratio"] == pytest.approx(1.2)
    assert first["accuracy"] == {"base": pytest.approx(98.0), "arm": pytest.approx(97.0)}
    assert first["accuracy_change"] == pytest.approx(-1.0) and first["test_loss_change"] == pytest.approx(0.02)
    assert first["froze"] == {"2": 131} and second["froze"] == {"1": 105, "2": 157}
    assert first["cache"] == {"cache_hits": 10, "cache_misses": 2} and second["cache"] is None
    assert first["decisions"] == [{"what": "froze level 2"}] and second["decisions"] is None  # not read: null
    figures = results.summary(comparison)
    assert figures["ratio"] == pytest.approx(1.35) and figures["accuracy_change"] == pytest.approx(-0.5)
    assert figures["seeds"] == [3, 4]


def test_a_file_is_never_overwritten(tmp_path):
    record = results.run_record("bench/o1_speedup.py", "python bench/o1_speedup.py", ROOT, "launch", 12, 2, ROUNDS,
                                "O0", ["O1"])
    first, second = results.write(record, tmp_path), results.write(record, tmp_path)
    assert first != second and second.endswith("-2.json") and "-launch-2w-" in first
    with open(first, encoding="utf-8") as handle:
        assert json.load(handle) == record
    # in the order written: a day's second file of a workload and commit after its first
    assert [loaded["file"] for loaded in results.load(tmp_path)] == [first.split("/")[-1], second.split("/")[-1]]
    with pytest.raises(ValueError, match="lacks comparisons"):
        results.write({key: value for key, value in record.items() if key != "comparisons"}, tmp_path)


def test_held_out_loss_is_the_mean_softmax_cross_entropy():
    logits = np.array([[2.0, 0.0, -1.0], [0.5, 0.5, 3.0]])
    labels = np.array([0, 1])
    expected = -np.mean([np.log(np.exp(2) / np.exp([2, 0, -1]).sum()),
                         np.log(np.exp(0.5) / np.exp([0.5, 0.5, 3]).sum())])
    assert results.held_out_loss(logits, labels) == pytest.approx(expected)


def test_decisions_are_read_where_a_cell_keeps_them():
    class Record:
        def to_dict(self):
            return {"what": "froze"}

    class Cell:
        decisions = [Record()]

    assert results.decisions(Cell()) == [{"what": "froze"}]
    assert results.decisions(object()) == []


def test_a_reported_figure_comes_before_the_rounded_seeds():
    comparison = {"seeds": [{"seed": 0, "ratio": 1.32, "accuracy": {"base": None, "arm": None},
                             "accuracy_change": None, "test_loss_change": None},
                            {"seed": 1, "ratio": 1.53, "accuracy": {"base": None, "arm": None},
                             "accuracy_change": None, "test_loss_change": None}],
                  "reported": {"ratio": 1.43, "accuracy_change": -0.42}}
    figures = results.summary(comparison)
    assert figures["ratio"] == 1.43 and figures["round_ratios"] == [1.32, 1.53]
    assert figures["accuracy_change"] == -0.42 and figures["accuracy"] is None and figures["test_loss_change"] is None


@pytest.mark.parametrize("record", results.load(), ids=lambda record: record["file"])
def test_every_committed_file_is_whole_and_its_rounds_agree_with_its_ratio(record):
    assert all(key in record for key in results.REQUIRED), record["file"]
    assert record["file"] == results.file_name(record) or record["file"].startswith(results.file_name(record)[:-5])
    if record.get("commit") is None:
        assert record.get("note"), "a file without its commit says why"
    for comparison in record["comparisons"]:
        figures = results.summary(comparison)
        assert figures["ratio"] is not None and figures["accuracy_change"] is not None
        if figures["round_ratios"]:
            assert abs(float(np.median(figures["round_ratios"])) - figures["ratio"]) <= 0.0051, comparison["arm"]


def test_the_example_loops_runs_make_a_record_per_seed():
    """bench/own_loop.py's ABBA runs (O0, arm, arm, O0 a seed) as a record's seeds: O0's mean seconds over the arm's,
    each arm's accuracy, what froze in the arm's first run of the seed ({} where nothing did; null where the runs do
    not say); its balance is not measured (the example prints its total time only)."""
    own_loop = pytest.importorskip("own_loop")
    froze = {(0, 1): {1: 105, 2: 105}, (0, 2): {2: 131}, (1, 1): {}, (1, 2): {}}
    runs = [{"config": config, "seed": seed, "seconds": seconds, "accuracy": accuracy,
             "froze": froze.get((seed, index), {})}
            for seed, times in ((0, (20.0, 10.0, 12.0, 24.0)), (1, (30.0, 15.0, 15.0, 30.0)))
            for index, (config, seconds, accuracy) in enumerate(zip(("O0", "O1", "O1", "O0"), times,
                                                                    (0.98, 0.97, 0.97, 0.98)))]
    record = results.run_record("bench/own_loop.py", "python bench/own_loop.py", ROOT, "own_loop", 12, 1,
                                own_loop.seed_measures(runs, "O1"), "O0", ["O1"])
    first, second = record["comparisons"][0]["seeds"]
    assert first["ratio"] == pytest.approx(22.0 / 11.0) and second["ratio"] == pytest.approx(2.0)
    assert first["accuracy_change"] == pytest.approx(-1.0)
    assert first["froze"] == {"1": 105, "2": 105} and second["froze"] == {}
    assert record["balance"] == {"o0_step_ms": None, "first_compile_s": None}
    for run in runs:
        run.pop("froze")
    record = results.run_record("bench/own_loop.py", "python bench/own_loop.py", ROOT, "own_loop", 12, 1,
                                own_loop.seed_measures(runs, "O1"), "O0", ["O1"])
    assert all(seed["froze"] is None for seed in record["comparisons"][0]["seeds"])


def test_the_example_loop_says_what_froze_in_its_decision_lines():
    """bench/own_loop.py reads what froze from the example's "decision:" lines (``report_decisions``): each level at
    the update after which it froze, the levels under a deeper one frozen by the same decision with it; payback's and
    the cache's decisions freeze nothing."""
    own_loop = pytest.importorskip("own_loop")
    output = "\n".join([
        "epoch  12  loss 0.0512  test acc 0.9861",
        "decision: update 39 of 528: allowed level 2: level 2 pays: ... [full step 14.2 ms (measured)]",
        "decision: update 131 of 528: froze level 2: segments 0-1 settled (displacement below auto_threshold ...)",
        "decision: update 262 of 528: cache: drop: samples do not repeat",
        "test accuracy: 0.9861"])
    assert own_loop.froze_levels(output) == {1: 131, 2: 131}
    assert own_loop.froze_levels(output.replace("froze level 2", "froze level 1")) == {1: 131}
    assert own_loop.froze_levels("decision: update 12 of 176: no level pays: ...\ntest accuracy: 0.9") == {}


def test_an_abba_rounds_two_runs_of_an_arm_count_as_one_over_their_whole_wall_time():
    """An arm's two runs of a seed (A B B A) give images a second over both runs' time (the harmonic mean: 100 and
    300 images a second over equal images are 150, not 200), the mean accuracy and test loss, None where either run
    lacks a figure, the first run's decisions and freezing, and both runs' own figures kept."""
    first = measures(100.0, 0.97, 0.10, decisions=[{"what": "froze level 2"}], first_update_at_level={2: 105})
    second = measures(300.0, 0.99, None, decisions=[], first_update_at_level={2: 131})
    merged = results.abba_measures(first, second)
    assert merged["end_to_end"] == pytest.approx(150.0)
    assert merged["accuracy"] == pytest.approx(0.98) and merged["test_loss"] is None
    assert merged["median_level0_step"] == pytest.approx(0.05)
    assert merged["decisions"] == [{"what": "froze level 2"}] and merged["first_update_at_level"] == {2: 105}
    assert [run["end_to_end"] for run in merged["runs"]] == [100.0, 300.0]
    record = results.seed_record(0, results.abba_measures(first, first), merged)
    assert record["ratio"] == pytest.approx(1.5) and record["accuracy_change"] == pytest.approx(1.0)
    assert [run["end_to_end"] for run in record["runs"]["arm"]] == [100.0, 300.0]
    assert record["steps"]["arm"]["median_step_ms"] == pytest.approx(50.0)


def test_the_routes_own_work_a_call_is_recorded_in_ms_and_none_without_a_route():
    """An arm with the frozen levels' route gives its own work a call (seconds, ``o1_speedup.RouteWork``) in ms
    beside its steps; an arm without it (O0) gives None, and an A B B A round averages the two runs'."""
    base, arm = measures(100.0, 0.98, 0.10), measures(99.0, 0.98, 0.10, route_work=0.00012)
    record = results.seed_record(0, base, arm)
    assert record["steps"]["arm"]["route_work_ms"] == pytest.approx(0.12)
    assert record["steps"]["base"]["route_work_ms"] is None
    merged = results.abba_measures(arm, measures(101.0, 0.98, 0.10, route_work=0.00008))
    assert merged["route_work"] == pytest.approx(0.0001)


class _Route:
    """A stand-in for ``FrozenLevelRoute`` with a set cost: each call spends ``own`` seconds of its own around the
    step of the level it runs, which spends ``step`` seconds (on the batch, or on the cache's outputs)."""

    def __init__(self, clock, own, step):
        self.clock, self.own, self.step_seconds = clock, own, step
        self.uncached = {0: self._step, 2: self._step}
        self.cached = {2: self._step}

    def _step(self, *inputs):
        self.clock.now += self.step_seconds
        return inputs

    def take_step(self, cell, inputs):
        self.clock.now += self.own / 2
        outputs = (self.cached[2] if inputs[0] == "cached" else self.uncached[0])(*inputs)
        self.clock.now += self.own / 2
        return outputs


def test_the_routes_own_work_is_each_call_less_the_step_it_ran_from_the_second_call_on():
    """``RouteWork`` counts what a call of the route spends beside the step it runs (on the batch or the cache's
    outputs), leaving out the first call (compiles, the run's state read), and the route's outputs pass through."""
    import o1_speedup  # pylint: disable=import-outside-toplevel  (MindSpore and the examples: this test only)
    clock = SetClock()
    route = _Route(clock, own=0.002, step=0.5)
    work = o1_speedup.RouteWork(route, clock)
    clock.now += 7.0  # time between calls (the data, callbacks) is not the route's
    assert route.take_step(None, ("batch",)) == ("batch",)
    route.own = 0.003
    for inputs in (("batch",), ("cached",), ("batch",)):
        clock.now += 1.0
        assert route.take_step(None, inputs) == inputs
    assert work.calls == 3 and work.seconds == pytest.approx(0.009)
