"""Gradient freezing in a real 2-worker msrun job (loopback, CPU collectives): replicas stay bit-identical, the
plain data-parallel run equals NumPy on the global batch, AdaSum and a planted overflow compose with freezing, and
the frozen-prefix cache (each rank caching its own rows, or every rank's where the ranks share its fill) trains as
freezing without it."""
from pathlib import Path

import numpy as np
import pytest

from tests.distributed.worker import ROWS
from tests.helpers import TanhMLP, batch, numpy_adasum, numpy_mlp_grads, scale_free_run
from tests.launch import msrun

pytestmark = pytest.mark.slow  # every test reads the results of a 2-worker msrun job

WORKER = Path(__file__).resolve().parent / "distributed" / "freeze_worker.py"
SCENARIOS = ["freeze", "freeze_adasum", "freeze_overflow", "freeze_auto", "freeze_loss", "freeze_loss_route",
             "freeze_payback",
             "freeze_cache_auto",
             "freeze_cached", "freeze_uncached", "freeze_dealt_cached", "freeze_dealt_uncached", "freeze_scale"]
GROUP_STARTS = (0, 4, 8)


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    out = tmp_path_factory.mktemp("freeze_dp")
    code, output = msrun(2, [WORKER, out, *SCENARIOS], out / "logs", timeout=300)
    assert code == 0, output[-5000:]
    return {(name, rank): dict(np.load(out / f"{name}_rank{rank}.npz")) for name in SCENARIOS for rank in range(2)}


@pytest.mark.parametrize("name", SCENARIOS)
def test_replicas_bit_identical(results, name):
    first, second = results[(name, 0)], results[(name, 1)]
    assert sorted(first) == sorted(second)
    for key in first:
        if key != "grad_freeze.loss_sum":  # each rank's own losses so far, summed over the ranks at each decision
            np.testing.assert_array_equal(first[key], second[key], err_msg=key)


def test_data_parallel_freeze_matches_numpy(results):
    """Mean of the two ranks' gradients = the global batch's; each step updates its suffix (momentum 0.9)."""
    result = results[("freeze", 0)]
    assert result["indices"].tolist() == [0, 0, 1, 2]
    params = [p.asnumpy().astype(np.float64) for p in TanhMLP().trainable_params()]
    names = [p.name for p in TanhMLP().trainable_params()]
    velocity = [np.zeros_like(p) for p in params]
    for step, index in enumerate(result["indices"]):
        x, y = batch(n=ROWS * 2, seed=step)
        grads = numpy_mlp_grads(params, x.astype(np.float64), y.astype(np.float64))
        for j in range(GROUP_STARTS[index], len(params)):
            velocity[j] = 0.9 * velocity[j] + grads[j]
            params[j] = params[j] - 0.1 * velocity[j]
    for name, want in zip(names, params):
        np.testing.assert_allclose(result[name], want, rtol=2e-5, atol=2e-6, err_msg=name)
    assert int(result["global_step"][0]) == 4


def test_adasum_and_overflow_compose(results):
    """AdaSum: each rank's SGD delta on its shard, over the trained suffix only, combined per tensor by AdaSum
    (NumPy); frozen tensors have zero deltas and stay. Overflow: skipped everywhere, position kept."""
    adasum = results[("freeze_adasum", 0)]
    assert adasum["indices"].tolist() == [0, 0, 1, 2]
    params = [p.asnumpy().astype(np.float64) for p in TanhMLP().trainable_params()]
    names = [p.name for p in TanhMLP().trainable_params()]
    for step, index in enumerate(adasum["indices"]):
        x, y = batch(n=ROWS * 2, seed=step)
        deltas = [[0.1 * g for g in numpy_mlp_grads(params, x[r * ROWS:(r + 1) * ROWS].astype(np.float64),
                                                     y[r * ROWS:(r + 1) * ROWS].astype(np.float64))]
                  for r in range(2)]
        start = GROUP_STARTS[index]
        combined = numpy_adasum([d[start:] for d in deltas])
        params = params[:start] + [p - c for p, c in zip(params[start:], combined)]
    for name, want in zip(names, params):
        np.testing.assert_allclose(adasum[name], want, rtol=5e-5, atol=5e-6, err_msg=name)
    overflow = results[("freeze_overflow", 0)]
    assert overflow["overflows"].tolist() == [False, True, False, False]
    assert overflow["indices"].tolist() == [0, 1, 1, 0]  # the overflowing step keeps the position
    assert int(overflow["global_step"][0]) == 3 and float(overflow["scale_sense"]) == 2.0 ** 9


def test_automatic_schedule_decides_alike_on_every_rank(results):
    """Both ranks freeze at the same steps (the bit-identical test above covers all state) and it did freeze."""
    indices = [results[("freeze_auto", rank)]["indices"].tolist() for rank in range(2)]
    assert indices[0] == indices[1] and max(indices[0]) >= 1 and indices[0][0] == 0


def test_the_loss_condition_decides_alike_on_every_rank(results):
    """Each rank's own losses differ, but the interval's losses are summed over the ranks at each decision: both
    ranks freeze at the same update (the bit-identical test above covers the loss record), once the global loss has
    halved, later than the front's displacement alone would have frozen it (after update 3)."""
    indices = [results[("freeze_loss", rank)]["indices"].tolist() for rank in range(2)]
    assert indices[0] == indices[1] and 2 in indices[0] and indices[0].index(2) > 3


def test_the_routes_decisions_sum_the_loss_over_the_ranks_too(results):
    """Where payback's host route takes the decisions (op by op between steps, the interval's losses all-reduced
    outside any graph), both ranks freeze at the same updates as well (the bit-identical test above covers the loss
    record, which differs unless summed over the ranks), once the global loss has fallen by 20%."""
    runs = [results[("freeze_loss_route", rank)] for rank in range(2)]
    indices = [run["indices"].tolist() for run in runs]
    assert all(bool(run["routed"]) for run in runs) and not bool(results[("freeze_loss", 0)]["routed"])
    assert indices[0] == indices[1] and max(indices[0]) >= 1 and indices[0].index(max(indices[0])) > 3


def test_payback_allows_the_same_levels_on_every_rank(results):
    """Ranks whose clocks disagree (freezing pays on one, not on the other) average their ledgers, so both allow
    the whole front's level alone and freeze it at the same step, straight to it (the bit-identical test above
    covers the weights and the allowed levels); alone, the slow-compiling rank would never have frozen."""
    runs = [results[("freeze_payback", rank)] for rank in range(2)]
    assert runs[0]["indices"].tolist() == runs[1]["indices"].tolist()
    assert max(runs[0]["indices"]) == 2 and 1 not in runs[0]["indices"].tolist()


def test_the_cache_on_auto_decides_alike_on_every_rank(results):
    """Ranks whose clocks disagree on the cache (faster on one, slower on the other) average their ledgers, so both
    start it at the same step, keep it after the A/B and serve the same steps from it (2 in the trace); alone, the
    slower rank would have dropped it (the bit-identical test above covers the weights)."""
    runs = [results[("freeze_cache_auto", rank)] for rank in range(2)]
    assert runs[0]["indices"].tolist() == runs[1]["indices"].tolist()
    assert runs[0]["indices"].tolist()[-1] == 2 and all(bool(run["caching"]) for run in runs)
    assert all(int(run["hits"]) > 0 for run in runs)


def test_frozen_prefix_cache_in_data_parallel_training(results):
    """Each rank caches its own shard's prefix outputs (hits from the second pass over the batches); the gradients
    of the suffix are all-reduced as without the cache, so the run equals the uncached one bit for bit (no
    BatchNorm: the prefix's inference mode changes nothing), on both ranks."""
    for rank in range(2):
        cached, uncached = results[("freeze_cached", rank)], results[("freeze_uncached", rank)]
        assert cached["indices"].tolist() == uncached["indices"].tolist() and max(cached["indices"]) == 2
        assert int(cached["hits"]) > 0 and int(uncached["hits"]) == -1
        assert int(cached["received"]) == 0  # without the steps per epoch the ranks do not share
        for key in cached:
            if key not in ("hits", "received"):
                np.testing.assert_array_equal(cached[key], uncached[key], err_msg=key)


def test_ranks_share_the_frozen_prefix_cache_fill(results):
    """Samples dealt out anew every epoch (rank r takes rank (r + epoch) % 2's rows): the level-1 prefix first runs
    in epoch 1 on the other rank's rows, so alone a rank would meet its epoch-2 rows uncached. The ranks share what
    their caches compute over the epoch from each level's first cached call, so epoch 2's first batch (level 1) and
    epoch 3's second (level 2, extended and shared in epochs 2 and 3) are served whole: 2 batches of ROWS hits. The
    shared outputs equal what the rank would have computed, so the run equals the uncached one bit for bit."""
    for rank in range(2):
        cached, uncached = results[("freeze_dealt_cached", rank)], results[("freeze_dealt_uncached", rank)]
        assert cached["indices"].tolist() == [0, 0, 1, 1, 1, 2, 2, 2]
        assert int(cached["hits"]) == 2 * ROWS
        assert int(cached["received"]) > 0
        for key in cached:
            if key not in ("hits", "received"):
                np.testing.assert_array_equal(cached[key], uncached[key], err_msg=key)


def first_freezes(run):
    """The share of the run after which each level was first reached."""
    levels, updates = list(run["levels"]), int(run["updates"])
    return [(next(t for t, reached in enumerate(levels) if reached >= level) + 1) / updates
            for level in range(1, max(levels) + 1)]


def test_the_automatic_schedule_freezes_at_the_same_share_at_any_data_size_and_worker_count(results):
    """Scale-free: the same run (5 epochs, batch 8 per rank) at 1x the data (64 samples, 40 updates), 4x the data
    (160 updates) and on 2 workers (each rank its half: 20 updates) freezes each level after the same share of the
    run, within one decision interval (a tenth of the run), and not before the warm-up (a quarter) has trained whole."""
    runs = {"1x": scale_free_run(64), "4x": scale_free_run(256), "2 workers": results[("freeze_scale", 0)]}
    assert [int(run["updates"]) for run in runs.values()] == [40, 160, 20]
    shares = {name: first_freezes(run) for name, run in runs.items()}
    assert all(len(found) == 2 for found in shares.values()), shares
    for found in shares.values():
        assert found[0] >= 0.25  # the first quarter of the updates trains every group
        for share, reference in zip(found, shares["1x"]):
            assert abs(share - reference) <= 0.1, shares
