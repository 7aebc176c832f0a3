"""Real data-parallel runs: msrun jobs of 2 and 4 workers on loopback with the CPU collective backend.

Each job runs many scenarios of tests/distributed/worker.py (launching costs ~20 s); every job has a timeout and
is killed as a process group when it runs past it, so a hang fails the test instead of the suite. The jobs also run
planted-fault plans drawn by Hypothesis (an inf or nan on a random rank at random steps), and the 4-worker job's O2
scenario is the reference for the same job launched as two nodes of 2 workers (``--node_rank``).
"""
import json
from pathlib import Path

import numpy as np
import mindspore as ms
import pytest
from hypothesis import Phase, given, settings
from hypothesis import strategies as st
from mindspore import Tensor

from boost_cells import BoostTrainOneStepCell
from tests import figures
from tests.conftest import examples
from tests.helpers import NumpyOptimizer, batch, linear_setup, numpy_adasum, numpy_dynamic, numpy_mse_grads
from tests.distributed.worker import PLAN_POLICY, ROWS, adasum_deltas
from tests.launch import FAST_FAILURE_ENV, finish_msrun, free_port, msrun, start_msrun

pytestmark = pytest.mark.slow  # every test reads the results of 2- and 4-worker msrun jobs

WORKER = Path(__file__).resolve().parent / "distributed" / "worker.py"
TWO_WORKER_SCENARIOS = ["o0", "planted_inf", "accumulate", "accumulate_loss_scaled", "reduce_every_micro_step",
                        "adasum_combine", "adasum_train", "adasum_accumulate", "adasum_bad_rank_count",
                        "planted_plans"]
FOUR_WORKER_SCENARIOS = ["adasum_combine", "adasum_train", "adasum_train_groups_of_2", "accumulate_loss_scaled",
                         "o2_groups_of_2", "planted_plans"]
PLAN_STEPS = 6
PLAN_COUNTS = {2: examples(10), 4: examples(6)}


def draw_plans(workers, count):
    """``count`` plans drawn by Hypothesis (deterministic under the CI profile) for a job of ``workers`` ranks: a
    kind (plain or accumulation over 2 micro-steps) and per step nothing or one fault, an inf, -inf or nan in one
    rank's inputs or labels. Drawn before the job starts, so the job runs them all in one launch."""
    fault = st.fixed_dictionaries({"rank": st.integers(0, workers - 1), "site": st.sampled_from(["x", "y"]),
                                   "value": st.sampled_from(["inf", "-inf", "nan"]),
                                   "where": st.integers(0, ROWS * 4 - 1)})
    plan = st.fixed_dictionaries({"kind": st.sampled_from(["plain", "accumulation"]),
                                  "steps": st.lists(st.one_of(st.none(), st.none(), fault), min_size=PLAN_STEPS,
                                                    max_size=PLAN_STEPS)})
    plans = []

    @settings(max_examples=count, phases=[Phase.generate])
    @given(plan)
    def collect(drawn):
        plans.append(drawn)
    collect()
    return plans[:count]


def run_job(tmp_path_factory, workers, scenarios, timeout):
    out = tmp_path_factory.mktemp(f"dp{workers}")
    plans = draw_plans(workers, PLAN_COUNTS[workers])
    (out / "plans.json").write_text(json.dumps(plans))
    code, output = msrun(workers, [WORKER, out, *scenarios], out / "logs", timeout)
    assert code == 0, output[-5000:]
    results = {(name, rank): dict(np.load(out / f"{name}_rank{rank}.npz"))
               for name in scenarios for rank in range(workers)}
    results["plans"] = plans
    return results


@pytest.fixture(scope="module")
def two_workers(tmp_path_factory):
    return run_job(tmp_path_factory, 2, TWO_WORKER_SCENARIOS, timeout=300)


@pytest.fixture(scope="module")
def four_workers(tmp_path_factory):
    return run_job(tmp_path_factory, 4, FOUR_WORKER_SCENARIOS, timeout=480)


def global_batch(step, size):
    return batch(n=ROWS * size, seed=step)


def initial_weights(optimizer="momentum"):
    return [p.asnumpy().astype(np.float64) for p in linear_setup(optimizer)[0].trainable_params()]


def numpy_train(batches, optimizer):
    """NumPy reference: one optimizer step per (x, y) batch, or per list of micro-batches (mean gradient)."""
    w, b = initial_weights()
    for item in batches:
        micro = item if isinstance(item, list) else [item]
        grads = [numpy_mse_grads(w, b, x.astype(np.float64), y.astype(np.float64)) for x, y in micro]
        w, b = optimizer.step([w, b], [np.mean([g[i] for g in grads], axis=0) for i in range(2)])
    return w, b


def assert_replicas_identical(results, name, workers):
    for rank in range(1, workers):
        for key, value in results[(name, 0)].items():
            np.testing.assert_array_equal(results[(name, rank)][key], value, err_msg=f"{name} rank {rank} {key}")


def assert_weights(result, expected, rtol=1e-5, atol=1e-6):
    for key, want in zip(("fc.weight", "fc.bias"), expected):
        np.testing.assert_allclose(result[key], want, rtol=rtol, atol=atol, err_msg=key)


def test_o0_equals_single_process_on_concatenated_batch(two_workers):
    assert_replicas_identical(two_workers, "o0", 2)
    batches = [global_batch(step, 2) for step in range(3)]
    assert_weights(two_workers[("o0", 0)], numpy_train(batches, NumpyOptimizer(0.1, 0.9)))
    ms.set_context(mode=ms.GRAPH_MODE, device_target="CPU")
    net, net_with_loss, opt = linear_setup("momentum")
    cell = BoostTrainOneStepCell(net_with_loss, opt, boost_config={"level": "O0"})
    for x, y in batches:
        cell(Tensor(x), Tensor(y))
    assert_weights(two_workers[("o0", 0)], [p.asnumpy() for p in net.trainable_params()])


def test_inf_on_one_rank_makes_every_rank_skip(two_workers):
    assert_replicas_identical(two_workers, "planted_inf", 2)
    result = two_workers[("planted_inf", 0)]
    assert result["overflows"].tolist() == [False, True, False, False]
    assert result["scales"].tolist() == [1024.0, 512.0, 512.0, 1024.0]
    clean = [global_batch(step, 2) for step in (0, 2, 3)]
    assert_weights(result, numpy_train(clean, NumpyOptimizer(0.1, 0.9)))


def cycles(steps, size, skip=()):
    """Accumulation cycles of 2 micro-steps over global micro-batches, skipping overflowing micro-steps."""
    clean = [global_batch(step, size) for step in range(steps) if step not in skip]
    return [clean[i:i + 2] for i in range(0, len(clean) - 1, 2)]


def test_accumulation_reduces_once_per_cycle_with_same_weights(two_workers):
    assert_replicas_identical(two_workers, "accumulate", 2)
    assert_replicas_identical(two_workers, "reduce_every_micro_step", 2)
    expected = numpy_train(cycles(6, 2), NumpyOptimizer(0.1, 0.9))
    assert_weights(two_workers[("accumulate", 0)], expected)
    assert_weights(two_workers[("reduce_every_micro_step", 0)], expected)
    assert_weights(two_workers[("accumulate", 0)],
                   [two_workers[("reduce_every_micro_step", 0)][k] for k in ("fc.weight", "fc.bias")])


@pytest.mark.parametrize("workers", [2, 4])
def test_loss_scaled_accumulation_skips_poisoned_micro_step_on_all_ranks(two_workers, four_workers, workers):
    results = two_workers if workers == 2 else four_workers
    assert_replicas_identical(results, "accumulate_loss_scaled", workers)
    result = results[("accumulate_loss_scaled", 0)]
    assert result["overflows"].tolist() == [step == 2 for step in range(6)]
    assert_weights(result, numpy_train(cycles(6, workers, skip={2}), NumpyOptimizer(0.1, 0.9)))


@pytest.mark.parametrize("workers", [2, 4])
def test_adasum_combine_equals_numpy_recursive_rule(two_workers, four_workers, workers):
    results = two_workers if workers == 2 else four_workers
    assert_replicas_identical(results, "adasum_combine", workers)
    expected = numpy_adasum([adasum_deltas(rank) for rank in range(workers)])
    for i, want in enumerate(expected):
        np.testing.assert_allclose(results[("adasum_combine", 0)][f"t{i}"], want, rtol=1e-5, atol=1e-6)
    if workers == 2:  # adasum(0, b) = b exactly: rank 0's last tensor is zero
        np.testing.assert_array_equal(results[("adasum_combine", 0)]["t3"], adasum_deltas(1)[3])


def numpy_adasum_train(workers, device_number, steps, micro_steps=1, lr=0.1):
    """SGD with AdaSum: groups average their gradients, each group's delta lr*g is combined recursively."""
    w, b = initial_weights("sgd")
    groups = workers // device_number
    for cycle in range(steps // micro_steps):
        deltas = []
        for group in range(groups):
            grads = []
            for micro in range(micro_steps):
                x, y = global_batch(cycle * micro_steps + micro, workers)
                for rank in range(group * device_number, (group + 1) * device_number):
                    rows = slice(rank * ROWS, (rank + 1) * ROWS)
                    grads.append(numpy_mse_grads(w, b, x[rows].astype(np.float64), y[rows].astype(np.float64)))
            deltas.append([lr * np.mean([g[i] for g in grads], axis=0) for i in range(2)])
        combined = numpy_adasum(deltas)
        w, b = w - combined[0], b - combined[1]
    return w, b


@pytest.mark.parametrize("workers, scenario, device_number", [
    (2, "adasum_train", 1), (4, "adasum_train", 1), (4, "adasum_train_groups_of_2", 2)])
def test_adasum_training_equals_numpy(two_workers, four_workers, workers, scenario, device_number):
    results = two_workers if workers == 2 else four_workers
    assert_replicas_identical(results, scenario, workers)
    assert_weights(results[(scenario, 0)], numpy_adasum_train(workers, device_number, 2))


def test_adasum_with_accumulation_equals_numpy(two_workers):
    assert_replicas_identical(two_workers, "adasum_accumulate", 2)
    assert_weights(two_workers[("adasum_accumulate", 0)], numpy_adasum_train(2, 1, 4, micro_steps=2))


def test_adasum_refuses_rank_count_it_cannot_serve(two_workers):
    message = str(two_workers[("adasum_bad_rank_count", 0)]["message"])
    assert "rank count 2" in message and "power of two >= 2" in message


def test_dead_worker_fails_the_job_fast_with_its_cause(tmp_path):
    """With FAST_FAILURE_ENV (MS_NODE_TIMEOUT=10) the job ends ~10 s after the worker's exit, not ~35 s."""
    code, output = msrun(2, [WORKER, tmp_path, "die"], tmp_path / "logs", timeout=180, env=FAST_FAILURE_ENV)
    assert code != 0
    assert "planted failure on rank 1" in output


@pytest.mark.parametrize("workers", [2, 4])
def test_planted_faults_on_random_ranks_skip_on_every_rank(two_workers, four_workers, workers):
    """Hypothesis plans (inf/-inf/nan in one random rank's inputs or labels at random steps): every rank takes the
    same decision, the replicas stay bit-identical (all but the accumulation buffers, which hold each rank's own
    gradient sum by design), no Parameter ever held a non-finite value, the scale follows
    the dynamic policy exactly (a NumPy rendering), and the weights are those of the clean steps alone (NumPy on
    the global batches)."""
    results = two_workers if workers == 2 else four_workers
    for index, plan in enumerate(results["plans"]):
        per_rank = [{key: value for key, value in results[("planted_plans", rank)].items()
                     if key.startswith(f"{index}.")} for rank in range(workers)]
        for rank in range(1, workers):
            for key, value in per_rank[0].items():
                if key.startswith(f"{index}.grad_accumulation.fc."):
                    continue   # each rank's own gradient sum until the cycle's last micro-step reduces it
                np.testing.assert_array_equal(per_rank[rank][key], value, err_msg=f"plan {index} rank {rank} {key}")
        result = per_rank[0]
        expected = [fault is not None for fault in plan["steps"]]
        assert result[f"{index}.flags"].tolist() == expected, (index, plan)
        assert result[f"{index}.finite"].all(), (index, plan)
        want = numpy_dynamic(expected, PLAN_POLICY["loss_scale_value"], PLAN_POLICY["factor"],
                             PLAN_POLICY["window"], PLAN_POLICY["min_scale"], PLAN_POLICY["max_scale"],
                             PLAN_POLICY["hysteresis"])
        np.testing.assert_array_equal(result[f"{index}.scales"], np.array(want, np.float64))
        clean = [global_batch(step, workers) for step, fault in enumerate(plan["steps"]) if fault is None]
        if plan["kind"] == "accumulation":
            clean = [clean[i:i + 2] for i in range(0, len(clean) - 1, 2)]
        weights = {"fc.weight": result[f"{index}.fc.weight"], "fc.bias": result[f"{index}.fc.bias"]}
        assert_weights(weights, numpy_train(clean, NumpyOptimizer(0.1, 0.9)))
        figures.add(f"planted faults on random ranks ({workers} workers): plans", 1)
        figures.add(f"planted faults on random ranks ({workers} workers): faults planted",
                    sum(fault is not None for fault in plan["steps"]))


def test_two_nodes_of_two_workers_equal_one_launch_of_four(four_workers, tmp_path):
    """The multi-node command of docs/reliability.md simulated on loopback: two msrun launches of 2 workers each,
    --node_rank 0 and 1, master 127.0.0.1, running O2 with AdaSum groups of 2 (one group per node). Within a group
    the replicas are bit-identical (all ranks' weights are, AdaSum gives every rank the same combination), and every
    rank ends bit-identical to the same rank of one launch of 4 workers. (The second launch runs msrun as a second
    machine would: tests/distributed/msrun_other_node.py.)"""
    port = free_port()
    args = [WORKER, tmp_path, "o2_groups_of_2"]
    launches = [start_msrun(4, args, tmp_path / f"node{node}", local_workers=2, node_rank=node, port=port,
                            other_node=node == 1) for node in (0, 1)]
    for node, launch in enumerate(launches):
        code, output = finish_msrun(launch, args, tmp_path / f"node{node}", timeout=300)
        assert code == 0, output[-5000:]
    nodes = {rank: dict(np.load(tmp_path / f"o2_groups_of_2_rank{rank}.npz")) for rank in range(4)}
    assert sorted((tmp_path / "node1").glob("worker_*.log"))[0].name == "worker_2.log"
    for rank in range(4):
        single = four_workers[("o2_groups_of_2", rank)]
        assert sorted(nodes[rank]) == sorted(single)
        for key, value in single.items():
            np.testing.assert_array_equal(nodes[rank][key], value, err_msg=f"rank {rank} {key}")
    for first, second in ((0, 1), (2, 3)):
        for key, value in nodes[first].items():
            np.testing.assert_array_equal(nodes[second][key], value, err_msg=f"group of ranks {first}, {second}")
    for key, value in nodes[0].items():   # across groups: all but each group's own momentum and AdaSum deltas
        if not key.startswith(("moments.", "adasum.old.")):
            np.testing.assert_array_equal(nodes[2][key], value, err_msg=f"across groups {key}")
