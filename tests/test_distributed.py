"""Real data-parallel runs: msrun jobs of 2 and 4 workers on loopback with the CPU collective backend.

Each job runs many scenarios of tests/distributed/worker.py (launching costs ~20 s); every job has a timeout and
is killed as a process group when it runs past it, so a hang fails the test instead of the suite.
"""
from pathlib import Path

import numpy as np
import mindspore as ms
import pytest
from mindspore import Tensor

from boost_cells import BoostTrainOneStepCell
from tests.helpers import NumpyOptimizer, batch, linear_setup, numpy_adasum, numpy_mse_grads
from tests.distributed.worker import ROWS, adasum_deltas
from tests.launch import msrun

WORKER = Path(__file__).resolve().parent / "distributed" / "worker.py"
TWO_WORKER_SCENARIOS = ["o0", "planted_inf", "accumulate", "accumulate_loss_scaled", "reduce_every_micro_step",
                        "adasum_combine", "adasum_train", "adasum_accumulate", "adasum_bad_rank_count"]
FOUR_WORKER_SCENARIOS = ["adasum_combine", "adasum_train", "adasum_train_groups_of_2", "accumulate_loss_scaled"]


def run_job(tmp_path_factory, workers, scenarios, timeout):
    out = tmp_path_factory.mktemp(f"dp{workers}")
    code, output = msrun(workers, [WORKER, out, *scenarios], out / "logs", timeout)
    assert code == 0, output[-5000:]
    return {(name, rank): dict(np.load(out / f"{name}_rank{rank}.npz"))
            for name in scenarios for rank in range(workers)}


@pytest.fixture(scope="module")
def two_workers(tmp_path_factory):
    return run_job(tmp_path_factory, 2, TWO_WORKER_SCENARIOS, timeout=300)


@pytest.fixture(scope="module")
def four_workers(tmp_path_factory):
    return run_job(tmp_path_factory, 4, FOUR_WORKER_SCENARIOS, timeout=420)


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
    code, output = msrun(2, [WORKER, tmp_path, "die"], tmp_path / "logs", timeout=180)
    assert code != 0
    assert "planted failure on rank 1" in output
