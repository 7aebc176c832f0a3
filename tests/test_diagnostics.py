"""The overflow locator: planted float16 overflows found first, forward and backward, against a NumPy reference;
the command; the train cell's and the callback's first-overflow report."""
import json
import os
import subprocess
import sys
from pathlib import Path

import mindspore as ms
import mindspore.dataset as ds
import numpy as np
import pytest
from mindspore import Tensor, nn
from mindspore.train import Model, RunContext

from boost_cells import BoostConfig, BoostTrainOneStepCell, BoostTrainOneStepWithLossScaleCell
from boost_cells.diagnostics import OverflowReportCallback, locate_overflow
from boost_cells.diagnostics.__main__ import main as command_main
from tests.conftest import MODES
from tests.launch import msrun
from tests.helpers import backward_overflow_net, forward_overflow_net, mlp_batch, weights_of

ROOT = Path(__file__).resolve().parent.parent
F16_MAX = 65504.0


def _reject_constant(name):
    raise ValueError(f"not strict JSON: {name}")


def strict_json(text):
    return json.loads(text, parse_constant=_reject_constant)


def f16_dense(x, w):
    """A float16 Dense without bias as MindSpore computes it on CPU: float16 operands, result rounded to float16."""
    with np.errstate(over="ignore", invalid="ignore"):
        return (x.astype(np.float16).astype(np.float32) @ w.astype(np.float16).astype(np.float32).T).astype(np.float16)


def numpy_mlp(w1, w2, w3, x):
    """The Float16MLP's forward pass: the Dense outputs h1, h2, out (float16) and the ReLU outputs r1, r2."""
    full = [np.full(shape, w, np.float32) for shape, w in (((8, 4), w1), ((8, 8), w2), ((2, 8), w3))]
    h1 = f16_dense(x, full[0])
    r1 = np.maximum(h1, 0)
    h2 = f16_dense(r1, full[1])
    r2 = np.maximum(h2, 0)
    return full, h1, r1, h2, r2, f16_dense(r2, full[2])


def kind(array):
    """The NumPy reference of a record's kind for one float16 array."""
    if np.isinf(array).any():
        return "inf"
    if np.isnan(array).any():
        return "nan"
    return "saturated" if np.abs(array).max() >= F16_MAX else None


def test_forward_overflow_is_found_first_and_mode_restored(mode):
    x, y = mlp_batch(1.0)
    _, h1, r1, h2, _, _ = numpy_mlp(1.0, 3000.0, 0.01, x)
    assert kind(h1) is None and kind(h2) == "inf"
    report = locate_overflow(forward_overflow_net(), Tensor(x), Tensor(y))
    assert ms.get_context("mode") == MODES[mode]
    first = report.first
    assert (first.name, first.path, first.type, first.phase, first.kind) == \
        ("features.2", "_backbone.features.2", "Dense", "forward", "inf")
    assert (first.dtype, first.shape, first.input_dtype) == ("Float16", (2, 8), "Float16")
    assert (first.input_min, first.input_max) == (float(r1.min()), float(r1.max()))
    assert (first.output_min, first.output_max) == (float(h2.min()), float(h2.max()))
    forward = [r.name for r in report.records if r.phase == "forward"]
    assert forward[:3] == ["features.2", "features.3", "features"]
    assert forward.index("classifier") < forward.index("_backbone") < forward.index("_loss_fn")
    phases = [r.phase for r in report.records]
    assert phases == sorted(phases, key=("forward", "backward").index)
    assert "features.0" not in forward and "features.1" not in forward


def test_backward_overflow_is_found_first_in_the_backward_pass(mode):
    x, y = mlp_batch(1e-3)
    sens = 1024.0
    full, *_, out = numpy_mlp(0.1, 0.1, 1000.0, x)
    arriving = (sens * 2 * (out.astype(np.float32) - y) / y.size).astype(np.float16)
    emitted = f16_dense(arriving, full[2].T)
    assert kind(out) is None and kind(arriving) is None and kind(emitted) == "inf"
    report = locate_overflow(backward_overflow_net(), Tensor(x), Tensor(y), sens=sens)
    assert ms.get_context("mode") == MODES[mode]
    first = report.first
    assert (first.name, first.type, first.phase, first.kind, first.dtype, first.shape) == \
        ("classifier", "Dense", "backward", "inf", "Float16", (2, 8))
    np.testing.assert_allclose([first.input_min, first.input_max], [arriving.min(), arriving.max()], rtol=1e-3)
    assert first.output_max == np.inf
    assert all(r.phase == "backward" for r in report.records)
    assert report.sens == sens


def test_clean_network_reports_nothing(mode):
    x, y = mlp_batch(1e-3)
    report = locate_overflow(backward_overflow_net(), Tensor(x), Tensor(y), sens=16.0)
    assert ms.get_context("mode") == MODES[mode]
    assert report.records == () and report.first is None and len(report) == 0
    assert "no cell produced" in str(report)
    assert strict_json(report.to_json())["records"] == []


@pytest.mark.parametrize("weight, expected", [(F16_MAX, "saturated"), (65472.0, None)])
def test_value_on_the_float16_maximum_is_saturated(weight, expected):
    """65504 is float16's largest finite value (reached, not exceeded: no inf); 65472 is the one below it."""
    net = nn.WithLossCell(nn.Dense(1, 1, weight_init=Tensor([[weight]], ms.float32), has_bias=False)
                          .to_float(ms.float16), nn.L1Loss())
    report = locate_overflow(net, Tensor([[1.0]], ms.float32), Tensor([[0.0]], ms.float32))
    if expected is None:
        assert len(report) == 0
        return
    assert (report.first.name, report.first.phase, report.first.kind) == ("_backbone", "forward", "saturated")
    assert report.first.output_max == F16_MAX
    assert {r.kind for r in report.records} == {"saturated"}


def test_report_table_and_json_name_the_first_offender():
    x, y = mlp_batch(1.0)
    report = locate_overflow(forward_overflow_net(), Tensor(x), Tensor(y), sens=Tensor(8.0, ms.float32))
    table = str(report)
    assert "first offender: 'features.2' (Dense, forward, inf)" in table
    first_row = table.splitlines()[2]
    assert first_row.endswith("<- first") and "features.2" in first_row
    data = strict_json(report.to_json())
    assert data["sens"] == 8.0 and data["loss"] == "inf"
    assert data["records"][0] == report.first.to_dict()
    assert data["records"][0]["output_max"] == "inf" and data["records"][0]["shape"] == [2, 8]
    assert len(data["records"]) == len(report)


def test_network_state_is_left_as_found():
    """The forward pass of a BatchNorm in training mode moves its statistics; the locator puts them back."""
    net = nn.WithLossCell(nn.SequentialCell([nn.Dense(4, 4), nn.BatchNorm1d(4)]), nn.MSELoss())
    net.set_train(True)
    before = {p.name: p.asnumpy().copy() for p in net.get_parameters()}
    x = Tensor(np.random.RandomState(0).randn(8, 4).astype(np.float32) * 5 + 3)
    locate_overflow(net, x, Tensor(np.zeros((8, 4), np.float32)))
    for parameter in net.get_parameters():
        np.testing.assert_array_equal(parameter.asnumpy(), before[parameter.name], err_msg=parameter.name)


class _RaisesAfterForward(nn.Cell):
    """A network with loss whose BatchNorm (in training mode) moves its statistics, then raises while ``fail``;
    else its loss indexes a Tensor by an int (what fails in a PyNative executor left with an open grad graph)."""

    def __init__(self):
        super().__init__()
        self.body = nn.SequentialCell([nn.Dense(4, 4), nn.BatchNorm1d(4)])
        self.fail = True

    def construct(self, x):
        out = self.body(x)
        if self.fail:
            raise ValueError("planted")
        return out[0].sum()


def test_a_raising_pass_leaves_the_mode_and_the_state_as_found(mode):
    """The network raises inside the locator's PyNative pass: the error comes through, the execution mode and the
    BatchNorm statistics are back as found, and the PyNative executor too (the next pass runs)."""
    net = _RaisesAfterForward()
    net.set_train(True)
    before = {p.name: p.asnumpy().copy() for p in net.get_parameters()}
    x = Tensor(np.random.RandomState(0).randn(8, 4).astype(np.float32) * 5 + 3)
    with pytest.raises(ValueError, match="planted"):
        locate_overflow(net, x)
    assert ms.get_context("mode") == MODES[mode]
    for parameter in net.get_parameters():
        np.testing.assert_array_equal(parameter.asnumpy(), before[parameter.name], err_msg=parameter.name)
    net.fail = False
    assert len(locate_overflow(net, x)) == 0
    assert ms.get_context("mode") == MODES[mode]


@pytest.mark.parametrize("sens", [0.0, -1.0, float("nan"), float("inf"), True, "1"])
def test_bad_sens_is_refused(sens):
    x, y = mlp_batch(1.0)
    with pytest.raises(ValueError, match="'sens' must be a finite number > 0"):
        locate_overflow(forward_overflow_net(), Tensor(x), Tensor(y), sens=sens)


def test_bad_network_is_refused():
    with pytest.raises(TypeError, match="'network' must be a Cell"):
        locate_overflow(lambda x: x, Tensor([1.0]))


FACTORY = """
from tests.helpers import forward_overflow_net


def make():
    return forward_overflow_net()
"""


@pytest.mark.slow  # a subprocess
def test_command_writes_valid_json(tmp_path):
    (tmp_path / "planted.py").write_text(FACTORY)
    np.savez(tmp_path / "batch.npz", *mlp_batch(1.0))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    result = subprocess.run([sys.executable, "-m", "boost_cells.diagnostics", "planted:make", "--inputs",
                             "batch.npz", "--sens", "4", "--json", "out.json"], cwd=tmp_path, env=env,
                            capture_output=True, text=True, timeout=300, check=False)
    assert result.returncode == 0, result.stderr
    assert "first offender: 'features.2' (Dense, forward, inf)" in result.stdout
    data = strict_json((tmp_path / "out.json").read_text())
    assert data["sens"] == 4.0
    assert (data["records"][0]["name"], data["records"][0]["kind"]) == ("features.2", "inf")


@pytest.mark.parametrize("argv, message", [
    (["no_colon", "--inputs", "b.npz"], "must look like 'my_module:make_net'"),
    (["no_such_module_here:make", "--inputs", "b.npz"], "cannot import module 'no_such_module_here'"),
    (["tests.helpers:no_such", "--inputs", "b.npz"], "has no callable 'no_such'"),
    (["tests.helpers:forward_overflow_net", "--inputs", "missing.npz"], "cannot read 'missing.npz'"),
])
def test_command_bad_arguments(argv, message, capsys):
    with pytest.raises(SystemExit) as exit_info:
        command_main(argv)
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


def _train(net_with_loss, **kwargs):
    optimizer = nn.SGD(net_with_loss.trainable_params(), learning_rate=1.0)
    policy = nn.DynamicLossScaleUpdateCell(loss_scale_value=1024.0, scale_factor=2, scale_window=1000)
    return BoostTrainOneStepWithLossScaleCell(net_with_loss, optimizer, policy, **kwargs)


def _run(cell, steps, batch):
    return [(bool(overflow.asnumpy()), float(scale.asnumpy())) for _, overflow, scale in
            (cell(*batch) for _ in range(steps))]


def test_train_cell_reports_first_overflow_and_goes_on(mode, tmp_path):
    """Scale 1024 overflows the classifier's input gradient (2560 * scale); halving it six times reaches 16, clean.
    The report is written once, for the first overflowing step's batch and scale; the run matches a plain run."""
    path = tmp_path / "reports" / "overflow.json"
    batch = tuple(Tensor(a) for a in mlp_batch(1e-3))
    reporting = _train(backward_overflow_net(), boost_config={"diagnostics": {"overflow_report": str(path)}})
    initial = weights_of(reporting.network)
    plain = _train(backward_overflow_net())
    trajectory = _run(reporting, 1, batch)
    assert trajectory == [(True, 512.0)]
    data = strict_json(path.read_text())
    assert data["sens"] == 1024.0
    assert (data["records"][0]["name"], data["records"][0]["phase"]) == ("classifier", "backward")
    assert ms.get_context("mode") == MODES[mode]
    path.unlink()
    trajectory += _run(reporting, 7, batch)
    assert not path.exists()
    assert trajectory == [(True, 1024.0 / 2 ** k) for k in range(1, 7)] + [(False, 16.0)] * 2
    assert _run(plain, 8, batch) == trajectory
    after, baseline = weights_of(reporting.network), weights_of(plain.network)
    for name, value in after.items():
        np.testing.assert_array_equal(value, baseline[name], err_msg=name)
    assert not np.array_equal(after["classifier.weight"], initial["classifier.weight"])


def test_train_cell_argument_and_off_state(graph_mode, tmp_path):
    path = tmp_path / "overflow.json"
    cell = _train(backward_overflow_net(), overflow_report=str(path))
    _run(cell, 1, tuple(Tensor(a) for a in mlp_batch(1e-3)))
    assert strict_json(path.read_text())["records"][0]["name"] == "classifier"
    assert _train(backward_overflow_net()).host_hooks == ()


def test_option_needs_a_loss_scaled_cell_and_a_path():
    net = backward_overflow_net()
    config = {"diagnostics": {"overflow_report": "report.json"}}
    with pytest.raises(ValueError, match="'diagnostics.overflow_report' must be null"):
        BoostTrainOneStepCell(net, nn.SGD(net.trainable_params()), boost_config=config)
    with pytest.raises(ValueError, match="'diagnostics.overflow_report' must be a path string or null"):
        BoostConfig.from_dict({"diagnostics": {"overflow_report": 3}})
    with pytest.raises(TypeError, match="'overflow_report' must be a path string"):
        _train(net, overflow_report=3)


def test_callback_reports_first_overflow_in_model_train(graph_mode, tmp_path):
    path = tmp_path / "overflow.json"
    x, y = mlp_batch(1e-3, n=4)
    dataset = ds.NumpySlicesDataset({"x": x, "y": y}, shuffle=False).batch(2)
    model = Model(_train(backward_overflow_net()))
    model.train(1, dataset, callbacks=[OverflowReportCallback(str(path))], dataset_sink_mode=False)
    data = strict_json(path.read_text())
    assert data["sens"] == 1024.0
    assert (data["records"][0]["name"], data["records"][0]["phase"]) == ("classifier", "backward")



class _CallbackParams(dict):
    """What ``Model`` hands callbacks: a dict whose keys read as attributes."""
    __getattr__ = dict.__getitem__


def test_callback_refuses_sink_mode(tmp_path):
    """On CPU ``Model`` falls back to non-sink mode by itself, so the check is driven directly here."""
    callback = OverflowReportCallback(str(tmp_path / "overflow.json"))
    with pytest.raises(ValueError, match="'dataset_sink_mode' must be False"):
        callback.on_train_begin(RunContext(_CallbackParams(dataset_sink_mode=True)))
    callback.on_train_begin(RunContext(_CallbackParams(dataset_sink_mode=False)))


def test_gradient_of_the_network_input_is_not_an_offender(graph_mode):
    """d loss / d x = 2 * 60000 overflows float16, but no train step computes it (the weight's gradient,
    2 * 1e-4, is clean): the report is empty, and the train step with that scale does not overflow either."""
    def net():
        return nn.WithLossCell(nn.Dense(1, 1, weight_init=Tensor([[60000.0]], ms.float32), has_bias=False)
                               .to_float(ms.float16), nn.L1Loss())
    x, y = Tensor([[1e-4]], ms.float32), Tensor([[0.0]], ms.float32)
    assert len(locate_overflow(net(), x, y, sens=2.0)) == 0
    trained = net()
    cell = BoostTrainOneStepWithLossScaleCell(trained, nn.SGD(trained.trainable_params()), Tensor(2.0, ms.float32))
    assert not cell(x, y)[1].asnumpy()


@pytest.mark.slow  # an msrun job
def test_data_parallel_reports_per_rank_and_replicas_agree(tmp_path):
    """2-worker msrun: only rank 0's batch overflows; both ranks skip (the flag is all-reduced) and each writes
    its own report, rank 0's naming the classifier, rank 1's empty; the replicas stay bit-identical."""
    code, output = msrun(2, [ROOT / "tests" / "distributed" / "overflow_report_worker.py", tmp_path],
                         tmp_path / "logs", timeout=300)
    assert code == 0, output[-5000:]
    reports = [strict_json((tmp_path / f"overflow.rank{rank}.json").read_text()) for rank in (0, 1)]
    assert (reports[0]["records"][0]["name"], reports[0]["records"][0]["phase"]) == ("classifier", "backward")
    assert reports[0]["sens"] == reports[1]["sens"] == 1024.0
    assert reports[1]["records"] == []
    assert not (tmp_path / "overflow.json").exists()
    results = [dict(np.load(tmp_path / f"result_rank{rank}.npz")) for rank in (0, 1)]
    assert results[0]["overflows"][0] and not results[0]["overflows"][-1]
    for name, value in results[0].items():
        np.testing.assert_array_equal(value, results[1][name], err_msg=name)
