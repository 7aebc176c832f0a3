"""MultiOptimizerTrainOneStepCell: window order, per-pair and shared skip decisions, NumPy references, names, the
GAN example, and a 2-worker msrun job."""
import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import mindspore as ms
import pytest
from mindspore import Tensor, nn

from boost_cells import DynamicLossScaleUpdate, MultiOptimizerTrainOneStepCell, NPUFloatStatusCheck
from tests.helpers import (NumpyOptimizer, ProbedLinear, Recorder, accumulation, batch, chained_pairs, gan_batch,
                           numpy_mse_grads, toy_gan, weights_of, without_forward_replay)
from tests.launch import ROOT, msrun

WORKER = Path(__file__).resolve().parent / "distributed" / "multi_optimizer_worker.py"

O0 = {"level": "O0"}


def as_numpy(net):
    return [p.asnumpy().astype(np.float64) for p in net.trainable_params()]


def numpy_chained(batches, shared_overflow, k=1):
    """NumPy reference for ``chained_pairs``: Momentum on the mean gradient of every ``k`` micro-batches; in list
    order the head reads the first network as updated this step, in shared mode as the step began. Returns the
    final weights of both networks and the two losses of every step."""
    first, head, _ = chained_pairs()
    (wa, ba), (wb, bb) = as_numpy(first), as_numpy(head)
    opt_a, opt_b = NumpyOptimizer(0.1, 0.9), NumpyOptimizer(0.1, 0.9)
    sums_a, sums_b, losses = [0, 0], [0, 0], []
    for step, (x, y) in enumerate(batches, 1):
        x, y = x.astype(np.float64), y.astype(np.float64)
        sums_a = [s + g for s, g in zip(sums_a, numpy_mse_grads(wa, ba, x, y))]
        new_a = opt_a.step([wa, ba], [s / k for s in sums_a]) if step % k == 0 else [wa, ba]
        read_a = (wa, ba) if shared_overflow else new_a
        hidden = x @ read_a[0].T + read_a[1]
        losses.append([np.mean((x @ wa.T + ba - y) ** 2), np.mean((hidden @ wb.T + bb - y) ** 2)])
        sums_b = [s + g for s, g in zip(sums_b, numpy_mse_grads(wb, bb, hidden, y))]
        if step % k == 0:
            wb, bb = opt_b.step([wb, bb], [s / k for s in sums_b])
            sums_a, sums_b = [0, 0], [0, 0]
        wa, ba = new_a
    return [wa, ba], [wb, bb], losses


@pytest.mark.parametrize("shared_overflow", [False, True], ids=["per_pair", "shared"])
def test_clean_steps_match_numpy(mode, shared_overflow):
    """Without overflow each pair takes a plain Momentum step: in list order (the head sees the first network's
    new weights) by default, from the step's starting weights when the decision is shared."""
    first, head, pairs = chained_pairs()
    cell = MultiOptimizerTrainOneStepCell(pairs, [Tensor(4.0), Tensor(1024.0)], shared_overflow, boost_config=O0)
    batches = [batch(seed=s) for s in range(3)]
    expected_a, expected_b, expected_losses = numpy_chained(batches, shared_overflow)
    for (x, y), expected in zip(batches, expected_losses):
        losses, overflows, scales = cell(Tensor(x), Tensor(y))
        np.testing.assert_allclose([float(v.asnumpy()) for v in losses], expected, rtol=1e-5)
        assert not any(bool(f.asnumpy()) for f in overflows)
        assert [float(s.asnumpy()) for s in scales] == [4.0, 1024.0]
    for got, want in zip(as_numpy(first) + as_numpy(head), expected_a + expected_b):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.slow  # over 3 s alone
def test_gan_step_equals_consecutive_plain_cells(mode):
    """Without overflow, one step equals MindSpore's plain ``nn.TrainOneStepCell`` for the discriminator followed by
    one for the generator (two Adams; the scale 1024 is a power of two, so unscaling is exact)."""
    discriminator, generator, pairs = toy_gan()
    cell = MultiOptimizerTrainOneStepCell(pairs, Tensor(1024.0), boost_config=O0)
    control_d, control_g, control_pairs = toy_gan()
    control_steps = [nn.TrainOneStepCell(*pair) for pair in control_pairs]
    for step in range(3):
        inputs = [Tensor(a) for a in gan_batch(step)]
        losses, _, _ = cell(*inputs)
        control_losses = [control(*inputs) for control in control_steps]
        assert [float(v.asnumpy()) for v in losses] == [float(v.asnumpy()) for v in control_losses]
    for net, control in ((discriminator, control_d), (generator, control_g)):
        for got, want in zip(as_numpy(net), as_numpy(control)):
            np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)


def test_accumulation_per_pair_matches_numpy(mode):
    """With accumulation over 2 micro-steps each pair applies its mean gradient on every 2nd micro-step; each
    pair's counter is its own Parameter (``pair<i>.grad_accumulation.accumulation_step``)."""
    first, head, pairs = chained_pairs()
    cell = MultiOptimizerTrainOneStepCell(pairs, Tensor(8.0), boost_config=accumulation(2))
    batches = [batch(seed=s) for s in range(4)]
    for x, y in batches:
        cell(Tensor(x), Tensor(y))
    expected_a, expected_b, _ = numpy_chained(batches, False, k=2)
    for got, want in zip(as_numpy(first) + as_numpy(head), expected_a + expected_b):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    names = {p.name for p in cell.get_parameters()}
    assert {"pair0.grad_accumulation.accumulation_step", "pair1.grad_accumulation.accumulation_step"} <= names


def optimizer_state(optimizer):
    return {p.name: p.asnumpy().copy() for p in optimizer.get_parameters()}


@pytest.mark.parametrize("shared_scale", [False, True], ids=["own_scales", "one_scale"])
@pytest.mark.parametrize("shared_overflow", [False, True], ids=["per_pair", "shared"])
def test_overflow_in_discriminator_loss(mode, shared_overflow, shared_scale):
    """An inf planted in the discriminator's loss at step 1 leaves its weights and Adam state exactly unchanged;
    the generator still steps by default, and not in shared mode. Scales (window 2, factor 2, from 1024): the
    discriminator's halves; the generator's own scale grows after its 2nd clean step unless the decision is
    shared; one shared scale is halved once."""
    discriminator, generator, pairs = toy_gan()
    policies = [DynamicLossScaleUpdate(1024.0, window=2), DynamicLossScaleUpdate(1024.0, window=2)]
    cell = MultiOptimizerTrainOneStepCell(pairs, policies[0] if shared_scale else policies, shared_overflow,
                                          boost_config=O0)
    d_opt, g_opt = pairs[0][1], pairs[1][1]
    generator_skips = shared_overflow
    expected_scales = [(1024.0, 1024.0), (512.0, 512.0 if shared_overflow or shared_scale else 2048.0)]
    for step in range(2):
        d_before, g_before = optimizer_state(d_opt), optimizer_state(g_opt)
        _, overflows, scales = cell(*(Tensor(a) for a in gan_batch(step, gain=np.inf if step == 1 else 1.0)))
        d_after, g_after = optimizer_state(d_opt), optimizer_state(g_opt)
        assert [bool(f.asnumpy()) for f in overflows] == [step == 1, False]
        assert tuple(float(s.asnumpy()) for s in scales) == expected_scales[step]
        d_same = all(np.array_equal(d_before[k], d_after[k]) for k in d_before)
        assert d_same == (step == 1)
        g_changed = {k for k in g_before if not np.array_equal(g_before[k], g_after[k])}
        g_expected = set() if step == 1 and generator_skips else \
            {"g.weight", "g.bias", "moment1.g.weight", "moment1.g.bias", "moment2.g.weight", "moment2.g.bias",
             "pair1.global_step", "pair1.beta1_power", "pair1.beta2_power"}
        assert g_changed == g_expected
    assert all(np.isfinite(w).all() for w in {**weights_of(discriminator), **weights_of(generator)}.values())


class _Tagged:
    """An events list for one pair's recorder: appends ``name + tag`` to a log shared by all pairs."""

    def __init__(self, log, tag):
        self.log, self.tag = log, tag

    def append(self, name):
        self.log.append(name + self.tag)


@pytest.mark.parametrize("distributed", [False, True], ids=["standalone", "distributed"])
def test_windows_are_ordered_and_skip_per_pair(mode, distributed):
    """Honest CPU test of the Ascend path: recording stand-ins replace NPUClear/GetFloatStatusV2 (no CPU kernel)
    and, when distributed, the status all-reduce. Each step must run pair 1's whole window (forward, clear,
    backward, read [, all-reduce], clear) before pair 2's forward; in GRAPH_MODE only depend edges force it. A
    non-zero status in pair 1's read skips pair 1 only. A PYNATIVE forward replay inside the backward pass is
    dropped, as in tests/test_overflow.py."""
    log, recorders = [], [Recorder(), Recorder()]
    for tag, recorder in zip("12", recorders):
        recorder.events = _Tagged(log, tag)
    nets = [ProbedLinear(recorder) for recorder in recorders]
    nets[1].fc.update_parameters_name("second.")
    detectors = [NPUFloatStatusCheck(distributed, clear_op=r.op("clear", True), get_op=r.op("get", True),
                                     all_reduce_op=r.op("all_reduce") if distributed else None) for r in recorders]
    pairs = [(net, nn.SGD(net.trainable_params(), 0.1)) for net in nets]
    cell = MultiOptimizerTrainOneStepCell(pairs, Tensor(4.0), boost_config=O0, overflow_detectors=detectors)
    window = ["forward", "clear", "backward", "get"] + (["all_reduce"] if distributed else []) + ["clear"]
    x, y = (Tensor(a) for a in batch())
    for step in range(2):
        recorders[0].status_value = step
        log.clear()
        before = [weights_of(net) for net in nets]
        _, overflows, _ = cell(x, y)
        assert without_forward_replay(without_forward_replay(log, mode, "1"), mode, "2") == \
            [e + "1" for e in window] + [e + "2" for e in window]
        assert [bool(f.asnumpy()) for f in overflows] == [bool(step), False]
        after = [weights_of(net) for net in nets]
        unchanged = [all(np.array_equal(b[k], a[k]) for k in b) for b, a in zip(before, after)]
        assert unchanged == [bool(step), False]


def test_names_stay_and_checkpoint_loads_into_plain_networks(graph_mode, tmp_path):
    """Two Adams (``global_step``, ``beta1_power``, ...) and two policies share state names: only that state is
    prefixed by its pair, the networks' parameters keep their names, and a checkpoint of the cell loads with
    strict_load into freshly built plain networks."""
    discriminator, generator, pairs = toy_gan()
    cell = MultiOptimizerTrainOneStepCell(pairs, [DynamicLossScaleUpdate(8.0), DynamicLossScaleUpdate(8.0)])
    cell(*(Tensor(a) for a in gan_batch(0)))
    names = [p.name for p in cell.get_parameters()]
    assert len(names) == len(set(names))
    assert [p.name for p in discriminator.trainable_params()] == ["d.weight", "d.bias"]
    assert [p.name for p in generator.trainable_params()] == ["g.weight", "g.bias"]
    prefixed = {n for n in names if n.startswith("pair")}
    assert prefixed == {f"pair{i}.{n}" for i in range(2) for n in (
        "global_step", "learning_rate", "beta1_power", "beta2_power", "scale_sense", "loss_scale.clean_steps",
        "loss_scale.overflows_left")}
    path = str(tmp_path / "gan.ckpt")
    ms.save_checkpoint(cell, path)
    fresh_d, fresh_g, _ = toy_gan()
    for fresh, trained in ((fresh_d, discriminator), (fresh_g, generator)):
        ms.load_param_into_net(fresh, ms.load_checkpoint(path), strict_load=True)
        assert all(np.array_equal(a, b) for a, b in zip(as_numpy(fresh), as_numpy(trained)))


@pytest.mark.parametrize("shared_overflow", [False, True], ids=["per_pair", "shared"])
def test_first_overflow_report_per_pair(graph_mode, tmp_path, shared_overflow):
    """With a config's ``diagnostics.overflow_report``, the pair whose own flag is set (not the other one, even when
    the decision is shared) gets a report of its network on that batch and scale, at ``<stem>.pair<i><ext>``."""
    _, _, pairs = toy_gan()
    config = {"level": "O0", "diagnostics": {"overflow_report": str(tmp_path / "report.json")}}
    cell = MultiOptimizerTrainOneStepCell(pairs, Tensor(64.0), shared_overflow, boost_config=config)
    for step in range(2):
        cell(*(Tensor(a) for a in gan_batch(step, gain=np.inf if step == 1 else 1.0)))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.pair0.json"]
    report = json.loads((tmp_path / "report.pair0.json").read_text())
    assert report["sens"] == 64.0 and report["records"]


def test_bad_arguments_are_named():
    _, _, pairs = chained_pairs()
    with pytest.raises(TypeError, match="'pairs' must be a non-empty list"):
        MultiOptimizerTrainOneStepCell([], Tensor(1.0))
    with pytest.raises(TypeError, match=r"'pairs\[1\]' must be a \(network_with_loss, optimizer\) pair"):
        MultiOptimizerTrainOneStepCell([pairs[0], pairs[1][0]], Tensor(1.0))
    with pytest.raises(ValueError, match="'scale_sense' must have one entry per pair \\(2\\), but got 3"):
        MultiOptimizerTrainOneStepCell(pairs, [Tensor(1.0)] * 3)
    with pytest.raises(TypeError, match="'shared_overflow' must be a bool"):
        MultiOptimizerTrainOneStepCell(pairs, Tensor(1.0), shared_overflow=1)
    with pytest.raises(TypeError, match="'overflow_report' must be a path string"):
        MultiOptimizerTrainOneStepCell(pairs, Tensor(1.0), overflow_report=3)
    with pytest.raises(TypeError, match="'overflow_detectors' must be a list"):
        MultiOptimizerTrainOneStepCell(pairs, Tensor(1.0), overflow_detectors=NPUFloatStatusCheck())
    with pytest.raises(TypeError, match="For 'MultiOptimizerTrainOneStepCell', 'optimizer' must be an optimizer"):
        MultiOptimizerTrainOneStepCell([(pairs[0][0], None)], Tensor(1.0))
    twin, _, twin_pairs = chained_pairs()
    with pytest.raises(ValueError, match="two different parameters named 'fc.weight'"):
        MultiOptimizerTrainOneStepCell([pairs[0], twin_pairs[0]], Tensor(1.0))
    assert [p.name for p in twin.trainable_params()] == ["fc.weight", "fc.bias"]


@pytest.mark.slow  # a subprocess
def test_gan_example_trains_in_float16_with_a_planted_overflow():
    """examples/gan.py as a user runs it: float16 networks, dynamic scales, an overflow planted in the
    discriminator's step 100; the script itself fails unless that step was skipped by the discriminator alone, every
    other loss stayed finite, and the classifier's confidence on generated digits reaches the minimum."""
    result = subprocess.run([sys.executable, str(ROOT / "examples" / "gan.py"), "--steps", "300",
                             "--min-confidence", "0.6"], cwd=ROOT, capture_output=True, text=True, timeout=240)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    skipped = re.search(r"skipped steps: discriminator \[(.*)\], generator \[(.*)\]", result.stdout)
    assert "100" in skipped.group(1).split(", ") and "100" not in skipped.group(2).split(", ")


@pytest.fixture(scope="module")
def two_workers(tmp_path_factory):
    out = tmp_path_factory.mktemp("multi_optimizer")
    code, output = msrun(2, [WORKER, out], out / "logs", timeout=300)
    assert code == 0, output[-5000:]
    return {(name, rank): dict(np.load(out / f"{name}_rank{rank}.npz"))
            for name in ("per_pair", "shared") for rank in range(2)}


@pytest.mark.slow  # an msrun job
@pytest.mark.parametrize("name", ["per_pair", "shared"])
def test_data_parallel_overflow_on_one_rank_is_skipped_on_both(two_workers, name):
    """2-worker msrun: an inf in the discriminator's loss on rank 1 at step 1 is skipped by the discriminator on
    both ranks (by the generator too in shared mode), and every parameter stays bit-identical across replicas."""
    ranks = two_workers[(name, 0)], two_workers[(name, 1)]
    assert ranks[0].keys() == ranks[1].keys()
    for key, value in ranks[0].items():
        np.testing.assert_array_equal(ranks[1][key], value, err_msg=key)
    shared = name == "shared"
    assert ranks[0]["overflows"].tolist() == [[False, False], [True, False], [False, False]]
    for prefix, skips in (("d.", True), ("g.", shared)):
        for weight in ("weight", "bias"):
            key = prefix + weight
            assert np.array_equal(ranks[0][f"0/{key}"], ranks[0][f"1/{key}"]) == skips, key
            assert not np.array_equal(ranks[0][f"1/{key}"], ranks[0][f"2/{key}"]), key
