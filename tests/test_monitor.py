"""BoostMonitor (hand-written loop and Model.train callback) and its plot, on tiny linear networks."""
import json
import math
import subprocess
import sys

import mindspore as ms
import numpy as np
import pytest
from mindspore import Tensor, nn
from mindspore.train import Model, RunContext
from mindspore.train.callback import _InternalCallbackParam

from boost_cells import (BoostMonitor, BoostTrainOneStepCell, BoostTrainOneStepWithLossScaleCell,
                         DynamicLossScaleUpdate)
from boost_cells.diagnostics import plot, read_run
from tests.helpers import TanhMLP, accumulation, batch, freeze_config, linear_setup
from tests.launch import ROOT

X, Y = batch()
BAD = X.copy()
BAD[2, 1] = np.inf
PLANTED = {3, 6, 7}  # 1-based steps fed a non-finite input


def scaled_cell(config=None, lr=0.1):
    _, net_with_loss, opt = linear_setup("momentum", lr=lr)
    return BoostTrainOneStepWithLossScaleCell(net_with_loss, opt, DynamicLossScaleUpdate(2.0 ** 8, window=2),
                                              boost_config=config)


def run(cell, monitor, steps):
    """Train ``steps`` steps (planted overflows included) and return the cell's outputs as floats per step."""
    seen = []
    for step in range(1, steps + 1):
        out = cell(Tensor(BAD if step in PLANTED else X), Tensor(Y))
        monitor.record(out, len(X))
        seen.append([float(t.asnumpy()) for t in (out if isinstance(out, tuple) else (out,))])
    return seen


def test_hand_written_loop_reports_every_interval(mode, tmp_path):
    lines = []
    cell = scaled_cell()
    monitor = BoostMonitor(4, tmp_path / "run.jsonl", cell, print_fn=lines.append)
    seen = run(cell, monitor, 10)
    monitor.close()
    records = read_run(tmp_path / "run.jsonl")
    assert [r["step"] for r in records] == [4, 8, 10] and [r["steps"] for r in records] == [4, 4, 2]
    assert len(lines) == 3 and lines[1].startswith("step 8  loss ")
    for record, chunk in zip(records, (seen[0:4], seen[4:8], seen[8:10])):
        assert record["loss"] == pytest.approx(np.mean([s[0] for s in chunk]), rel=1e-6)
        assert record["loss_scale"] == chunk[-1][2]
        assert record["loss_scale_log2"] == pytest.approx(math.log2(chunk[-1][2]))
        assert record["overflows"] == sum(s[1] for s in chunk) == record["skipped"]
        assert record["overflow_rate"] == record["overflows"] / record["steps"]
        assert record["updates"] == record["steps"] - record["overflows"]  # Momentum counts its real updates
        assert record["lr"] == pytest.approx(0.1) and record["samples_per_s"] > 0
    assert [s for r in records for s in r["overflow_steps"]] == sorted(PLANTED)
    assert "overflows 2/4 (50.0%)" in lines[1] and "lr 0.1" in lines[1] and "samples/s" in lines[1]
    # The scale the cell holds is what the last record says.
    assert records[-1]["loss_scale"] == float(cell.scale_sense.asnumpy())


def test_a_step_reads_nothing_from_the_device(graph_mode, monkeypatch):
    """record() only keeps the returned tensors; they are read once per interval, not once per step."""
    cell = scaled_cell()
    outputs = [cell(Tensor(X), Tensor(Y)) for _ in range(3)]
    reads = []
    original = Tensor.asnumpy
    monkeypatch.setattr(Tensor, "asnumpy", lambda self: reads.append(1) or original(self))
    monitor = BoostMonitor(3, train_cell=cell, print_fn=None)
    reads.clear()
    monitor.record(outputs[0], 8)
    monitor.record(outputs[1], 8)
    assert not reads
    monitor.record(outputs[2], 8)
    assert reads


def test_resumed_run_appends_and_continues_the_step_count(graph_mode, tmp_path):
    path = tmp_path / "run.jsonl"
    cell = scaled_cell()
    with BoostMonitor(2, path, cell, print_fn=None) as monitor:
        run(cell, monitor, 4)
    with BoostMonitor(2, path, cell, print_fn=None) as monitor:
        monitor.record(cell(Tensor(X), Tensor(Y)), 8)
    assert [r["step"] for r in read_run(path)] == [2, 4, 5]


def test_accumulation_micro_step_and_plain_cell(mode):
    cell = scaled_cell(accumulation(3))
    lines = []
    monitor = BoostMonitor(1, train_cell=cell, print_fn=lines.append)
    records = [monitor.record(cell(Tensor(X), Tensor(Y)), 8) for _ in range(4)]
    assert [r["features"] for r in records] == [{"accumulation_step": k} for k in (1, 2, 0, 1)]
    assert [r["updates"] for r in records] == [0, 0, 1, 0]
    assert "accumulation step 1" in lines[0]
    _, net_with_loss, opt = linear_setup()
    plain = BoostTrainOneStepCell(net_with_loss, opt)
    monitor = BoostMonitor(1, train_cell=plain, print_fn=lines.append)
    monitor.record(plain(Tensor(X), Tensor(Y)), 8)
    assert "scale" not in lines[-1] and "overflows" not in lines[-1]


@pytest.mark.parametrize("schedule", ["list", "cosine", "groups"])
def test_learning_rate_of_the_last_step(graph_mode, schedule):
    """A per-step list and a schedule Cell are indexed by the last step's global step; groups give a list."""
    net, net_with_loss, _ = linear_setup()
    if schedule == "groups":
        lr = 0.1
        params = [{"params": [net.fc.weight], "lr": 0.2}, {"params": [net.fc.bias]}]
        expected = [[0.2, 0.1]] * 3
    else:
        lr = [0.1, 0.05, 0.01, 0.005] if schedule == "list" else nn.CosineDecayLR(0.0, 0.1, 4)
        params = net.trainable_params()
        expected = [0.1, 0.05, 0.01] if schedule == "list" else [0.1 * 0.5 * (1 + math.cos(math.pi * i / 4))
                                                                  for i in range(3)]
    cell = BoostTrainOneStepCell(net_with_loss, nn.Momentum(params, lr, 0.9))
    monitor = BoostMonitor(1, train_cell=cell, print_fn=None)
    got = [monitor.record(cell(Tensor(X), Tensor(Y)), 8)["lr"] for _ in range(3)]
    np.testing.assert_allclose(got, expected, rtol=1e-6)


@pytest.mark.slow  # over 3 s alone
def test_feature_state_comes_from_the_freezing_and_accumulation_parts(graph_mode):
    """Under gradient freezing (continuous schedule [0, 0, 1, 2] for 3 groups at freeze_p 0.5) the monitor reports
    the group the next step trains from, read from the freezing part's ``monitor_state()``, and the learning rate
    and updates of the optimizer behind the FreezeOpt."""
    net = TanhMLP()
    cell = BoostTrainOneStepWithLossScaleCell(nn.WithLossCell(net, nn.MSELoss()),
                                              nn.Momentum(net.trainable_params(), 0.1, 0.9), Tensor(8.0),
                                              boost_config=freeze_config(param_groups=3, freeze_type=0,
                                                                         freeze_p=0.5, total_steps=10))
    lines = []
    monitor = BoostMonitor(1, train_cell=cell, print_fn=lines.append)
    x, y = (Tensor(a) for a in batch())
    records = [monitor.record(cell(x, y), 8) for _ in range(4)]
    assert [r["features"]["freeze_group"] for r in records] == [0, 1, 2, 0]
    assert all(r["lr"] == pytest.approx(0.1) and r["updates"] == 1 for r in records)
    assert lines[-1].endswith("freeze group 0")


def test_feature_state_of_accumulation(graph_mode):
    cell = scaled_cell(accumulation(2))
    lines = []
    monitor = BoostMonitor(1, train_cell=cell, print_fn=lines.append)
    assert monitor.record(cell(Tensor(X), Tensor(Y)), 8)["features"] == {"accumulation_step": 1}
    assert lines[-1].endswith("accumulation step 1")


def test_model_train_callback(graph_mode, tmp_path):
    """Model.train with the train cell as network: outputs, batch size and cell come from the run."""
    cell = scaled_cell()
    data = ms.dataset.NumpySlicesDataset({"x": np.tile(X, (3, 1)), "y": np.tile(Y, (3, 1))}, shuffle=False)
    lines = []
    monitor = BoostMonitor(2, tmp_path / "model.jsonl", print_fn=lines.append)
    Model(cell).train(1, data.batch(4), callbacks=[monitor], dataset_sink_mode=False)
    records = read_run(tmp_path / "model.jsonl")
    assert [r["step"] for r in records] == [2, 4, 6] and len(lines) == 3
    assert all(r["loss_scale"] is not None and r["lr"] == pytest.approx(0.1) for r in records)
    assert records[-1]["loss_scale"] == float(cell.scale_sense.asnumpy())
    assert sum(r["updates"] for r in records) == 6


def test_sink_mode_is_refused():
    """Sink mode exists on GPU/Ascend only (CPU falls back), so the run context is built by hand here."""
    params = RunContext(_InternalCallbackParam())
    params.original_args().dataset_sink_mode = True
    with pytest.raises(ValueError, match="'dataset_sink_mode' must be False, but got True"):
        BoostMonitor(print_fn=None).on_train_begin(params)


@pytest.mark.parametrize("kwargs, error, message", [
    ({"interval": 0}, ValueError, "'interval' must be an int >= 1, but got 0"),
    ({"interval": 2.0}, ValueError, "'interval' must be an int >= 1"),
    ({"train_cell": "cell"}, TypeError, "'train_cell' must be a Cell, but got str"),
])
def test_bad_arguments(kwargs, error, message):
    with pytest.raises(error, match=message):
        BoostMonitor(**kwargs)


def test_bad_record_inputs():
    monitor = BoostMonitor(2, print_fn=None)
    with pytest.raises(ValueError, match="'batch_size' must be an int >= 1, but got 0"):
        monitor.record(Tensor(1.0), 0)
    with pytest.raises(TypeError, match="'outputs' must be the loss Tensor or the tuple"):
        monitor.record((Tensor(1.0), Tensor(False)), 8)


def test_plot_draws_a_png(graph_mode, tmp_path):
    cell = scaled_cell()
    with BoostMonitor(2, tmp_path / "run.jsonl", cell, print_fn=None) as monitor:
        run(cell, monitor, 10)
    assert plot.main([str(tmp_path / "run.jsonl"), "-o", str(tmp_path / "run.png")]) == 0
    image = (tmp_path / "run.png").read_bytes()
    assert image.startswith(b"\x89PNG") and len(image) > 10_000


def test_plot_without_matplotlib_says_how_to_install(tmp_path, monkeypatch, capsys):
    (tmp_path / "run.jsonl").write_text(json.dumps({"step": 1}) + "\n")
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    assert plot.main([str(tmp_path / "run.jsonl"), "-o", str(tmp_path / "run.png")]) == 2
    assert "pip install 'boost_cells[plot]'" in capsys.readouterr().err
    assert not (tmp_path / "run.png").exists()


@pytest.mark.slow  # two subprocesses
def test_example_writes_a_monitor_log_that_plots(tmp_path):
    """examples/train.py --monitor, float16 (O2) under the log2 policy, one epoch, then python -m boost_cells.plot on
    its log, as docs/monitor.md shows them."""
    log = tmp_path / "run.jsonl"
    result = subprocess.run([sys.executable, "examples/train.py", "--config", "configs/log2_loss_scale.json",
                             "--amp-level", "O2", "--epochs", "1", "--monitor", str(log)], cwd=ROOT,
                            capture_output=True, text=True, timeout=240)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    records = read_run(log)
    assert [r["step"] for r in records] == [10, 20, 30, 40, 44]  # 1437 images, batch 32: 44 steps
    assert all(r["loss_scale"] > 0 and r["lr"] == pytest.approx(0.05) for r in records)
    assert sum(r["updates"] + r["skipped"] for r in records) == 44
    result = subprocess.run([sys.executable, "-m", "boost_cells.plot", str(log), "-o", str(tmp_path / "run.png")],
                            cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0 and "wrote" in result.stdout, result.stderr[-2000:]
    assert (tmp_path / "run.png").read_bytes().startswith(b"\x89PNG")
