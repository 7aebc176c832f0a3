"""Files we read and write, damaged on purpose (Hypothesis picks where): a truncated or corrupted checkpoint, PCA
``.npy`` or config file gives an error naming the file, nothing of ours is unpickled, what we write (PCA matrix,
overflow report, monitor log) is written atomically or appended a whole line at a time, a torn monitor log resumes,
and an unwritable path fails when the object is built, not when the file is first due."""
import ast
import json
import os
import sys

import mindspore as ms
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from mindspore import Model, Tensor

from boost_cells import (BoostConfig, BoostMonitor, BoostTrainOneStepCell, BoostTrainOneStepWithLossScaleCell,
                         DynamicLossScaleUpdate, OverflowReportCallback, build_train_network)
from boost_cells.diagnostics import read_run
from boost_cells import files
from tests import figures
from tests.conftest import examples
from tests.helpers import batch, linear_setup
from tests.launch import ROOT

sys.path.insert(0, str(ROOT / "examples"))
import train as example  # noqa: E402  (examples/train.py: docs/reliability.md's resume recipe)

X, Y = (Tensor(a) for a in batch())


def damage(data, draw_cut, flips):
    """``data`` cut to ``draw_cut`` bytes (None: whole) with the bytes at ``flips`` (offsets, taken modulo the
    length) XORed with their masks."""
    out = bytearray(data if draw_cut is None else data[:draw_cut])
    for offset, mask in flips:
        if out:
            out[offset % len(out)] ^= mask
    return bytes(out)


damages = st.tuples(st.one_of(st.none(), st.integers(0, 10_000)),
                    st.lists(st.tuples(st.integers(0, 10_000), st.integers(1, 255)), max_size=3))


# --- BoostMonitor's log -----------------------------------------------------------------------------------------

def log_steps(path, steps, interval=1, **kwargs):
    """Record ``steps`` steps of loss = step number through a BoostMonitor; returns it (closed)."""
    monitor = BoostMonitor(interval, path, print_fn=None, **kwargs)
    for _ in range(steps):
        monitor.record(Tensor(np.float32(monitor.step + len(monitor._pending) + 1)), 4)
    monitor.close()
    return monitor


@pytest.mark.slow  # a Hypothesis property
@settings(max_examples=examples(40))
@given(cut=st.integers(0, 200), garbage=st.sampled_from([b"", b"\n", b"\x00\x00\x00", b"{\"st", b"}\n"]))
def test_a_torn_last_line_is_dropped_and_the_resumed_log_stays_whole(tmp_path_factory, cut, garbage):
    """A worker killed mid-write leaves part of its last record (maybe followed by anything): a new BoostMonitor
    opens the log without error, keeps every whole record, continues from the last one's step, and appends whole
    lines after them."""
    figures.add("damaged files: monitor logs with a torn last line")
    path = tmp_path_factory.mktemp("torn") / "run.jsonl"
    log_steps(path, 4)
    data = path.read_bytes()
    last_start = data.rstrip(b"\n").rfind(b"\n") + 1
    cut = min(cut, len(data) - last_start)
    path.write_bytes(data[:last_start + cut] + garbage)
    whole = []
    for line in path.read_bytes().split(b"\n"):   # the records before the first line that is not one
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except ValueError:
            break
        if not isinstance(record, dict) or not isinstance(record.get("step"), int):
            break
        whole.append(record)
    monitor = log_steps(path, 2)
    records = read_run(path)
    assert [r["step"] for r in records] == [r["step"] for r in whole] + [len(whole) + 1, len(whole) + 2]
    assert monitor.step == len(whole) + 2
    assert path.read_bytes().endswith(b"}\n")
    assert all(json.loads(line) for line in path.read_text().splitlines())


def test_resume_step_drops_the_records_after_it_and_realigns(tmp_path):
    path = tmp_path / "run.jsonl"
    log_steps(path, 12, interval=2)
    with pytest.warns(UserWarning, match=r"resumes after step 7: dropped 3 record\(s\) of steps 8..12"):
        monitor = log_steps(path, 5, interval=2, resume_step=7)
    assert [r["step"] for r in read_run(path)] == [2, 4, 6, 8, 10, 12]
    assert [r["steps"] for r in read_run(path)] == [2, 2, 2, 1, 2, 2]   # step 8's record covers step 8 only
    assert monitor.step == 12


def test_model_train_continues_the_log_from_initial_epoch(graph_mode, tmp_path):
    """As a Model.train callback the monitor takes the run's position (initial_epoch x steps per epoch): the records
    after it are dropped (a record straddling it too: step 3 falls in the dropped record of steps 3-4)."""
    _, net_with_loss, opt = linear_setup("momentum")
    cell = BoostTrainOneStepWithLossScaleCell(net_with_loss, opt, DynamicLossScaleUpdate(256.0, window=2))
    x, y = batch(n=12)

    def data():  # 3 steps per epoch; a dataset serves one Model only
        return ms.dataset.NumpySlicesDataset({"x": x, "y": y}, shuffle=False).batch(4)
    path = tmp_path / "run.jsonl"
    Model(cell).train(2, data(), callbacks=[BoostMonitor(2, path, print_fn=None)], dataset_sink_mode=False)
    assert [r["step"] for r in read_run(path)] == [2, 4, 6]
    with pytest.warns(UserWarning, match="resumes after step 3: dropped 2 record"):
        Model(cell).train(3, data(), callbacks=[BoostMonitor(2, path, print_fn=None)], dataset_sink_mode=False,
                          initial_epoch=1)
    assert [(r["step"], r["steps"]) for r in read_run(path)] == [(2, 2), (4, 1), (6, 2), (8, 2), (9, 1)]


def test_a_damaged_line_before_the_end_is_an_error_naming_the_file(tmp_path):
    path = tmp_path / "run.jsonl"
    log_steps(path, 3)
    lines = path.read_text().splitlines()
    path.write_text("\n".join([lines[0], lines[1][:10], lines[2]]) + "\n")
    for build in (lambda: BoostMonitor(1, path, print_fn=None), lambda: read_run(path)):
        with pytest.raises(ValueError, match=f"'{path}' cannot be read: line 2 is not a BoostMonitor record"):
            build()


def test_records_are_appended_a_whole_line_per_write(tmp_path, monkeypatch):
    """One ``os.write`` per record, on an O_APPEND descriptor: a kill cannot split a record between two calls."""
    writes = []
    original = os.write
    monkeypatch.setattr(os, "write", lambda fd, data: writes.append(data) or original(fd, data))
    log_steps(tmp_path / "run.jsonl", 3)
    assert len(writes) == 3 and all(w.endswith(b"}\n") and w.count(b"\n") == 1 for w in writes)


# --- unwritable paths fail at construction -----------------------------------------------------------------------

@pytest.fixture(params=["directory", "under a file"])
def unwritable(request, tmp_path):
    """A path no file can be written to (the tests run as root, so permissions would not stop them)."""
    (tmp_path / "plain").write_text("a file")
    return tmp_path if request.param == "directory" else tmp_path / "plain" / "out.json"


def test_unwritable_paths_fail_when_the_object_is_built(graph_mode, unwritable):
    with pytest.raises(ValueError, match=f"'path'.*{unwritable}"):
        BoostMonitor(10, unwritable)
    with pytest.raises(ValueError, match=f"'overflow_report'.*{unwritable}"):
        OverflowReportCallback(unwritable)
    _, net_with_loss, opt = linear_setup()
    with pytest.raises(ValueError, match=f"'overflow_report'.*{unwritable}"):
        BoostTrainOneStepWithLossScaleCell(net_with_loss, opt, Tensor(8.0), overflow_report=unwritable)
    config = {"loss_scale": {"type": "static", "init": 8.0}, "diagnostics": {"overflow_report": str(unwritable)}}
    with pytest.raises(ValueError, match=f"'overflow_report'.*{unwritable}"):
        build_train_network(net_with_loss, opt, config)


def test_an_unwritable_pca_path_fails_before_the_matrix_is_computed(graph_mode, tmp_path, monkeypatch):
    (tmp_path / "plain").write_text("a file")
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    net, net_with_loss, opt = linear_setup()
    for i in range(3):
        ms.save_checkpoint(net, str(ckpt / f"w{i}.ckpt"))
    config = dim_reduce_config(str(tmp_path / "plain" / "pca.npy"), weight_load_dir=str(ckpt), n_components=2)
    with pytest.raises(ValueError, match=f"pca_mat_path.*{tmp_path / 'plain' / 'pca.npy'}.*cannot be written"):
        BoostTrainOneStepCell(net_with_loss, opt, boost_config=config)


# --- what we write is written atomically --------------------------------------------------------------------------

def test_a_write_that_fails_half_way_leaves_the_old_file_and_no_debris(tmp_path, monkeypatch):
    """files.write_atomic (the overflow report, the CLI's --json): the text goes to a temporary file, which is only
    renamed over the target once flushed; a failure before that leaves the target as it was."""
    target = tmp_path / "report.json"
    target.write_text('{"old": true}')

    def fail(fd):
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(os, "fsync", fail)
    with pytest.raises(OSError, match="No space left"):
        files.write_atomic(str(target), '{"new": ' + "1" * 100_000 + "}")
    assert target.read_text() == '{"old": true}' and sorted(os.listdir(tmp_path)) == ["report.json"]


def test_overflow_report_is_whole_json_and_leaves_no_temporary_file(graph_mode, tmp_path):
    _, net_with_loss, opt = linear_setup()
    report = tmp_path / "reports" / "overflow.json"   # the directory is made at construction
    cell = BoostTrainOneStepWithLossScaleCell(net_with_loss, opt, DynamicLossScaleUpdate(2.0 ** 8),
                                              overflow_report=report)
    x = X.asnumpy().copy()
    x[0, 0] = np.inf
    cell(Tensor(x), Y)
    assert json.loads(report.read_text())["records"]
    assert os.listdir(report.parent) == ["overflow.json"]


# --- PCA matrix ---------------------------------------------------------------------------------------------------

def dim_reduce_config(pca_mat_path, weight_load_dir=None, n_components=2):
    return {"boost": {"mode": "manual", "dim_reduce": True},
            "dim_reduce": {"pca_mat_path": pca_mat_path, "weight_load_dir": weight_load_dir,
                           "n_components": n_components}}


def build_dim_reduce(path):
    """A DimReduce train cell over Linear(4, 3) (15 weights) reading its 2 x 15 matrix from ``path``."""
    _, net_with_loss, opt = linear_setup()
    return BoostTrainOneStepCell(net_with_loss, opt, boost_config=dim_reduce_config(str(path)))


@pytest.fixture(scope="module")
def pca_file(tmp_path_factory):
    """A 2 x 15 PCA matrix written by DimReduce itself (computed from 3 checkpoints), with its .sha256."""
    root = tmp_path_factory.mktemp("pca")
    (root / "ckpt").mkdir()
    ms.set_context(mode=ms.GRAPH_MODE, device_target="CPU")
    net, net_with_loss, opt = linear_setup()
    rng = np.random.RandomState(0)
    for i in range(3):
        for param in net.trainable_params():
            param.set_data(Tensor(rng.randn(*param.shape).astype(np.float32)))
        ms.save_checkpoint(net, str(root / "ckpt" / f"w{i}.ckpt"))
    BoostTrainOneStepCell(net_with_loss, opt, boost_config=dim_reduce_config(str(root / "pca.npy"),
                                                                            str(root / "ckpt")))
    assert (root / "pca.npy.sha256").exists()
    return root / "pca.npy"


@pytest.mark.slow  # a Hypothesis property
@settings(max_examples=examples(30))
@given(how=damages, sidecar=st.booleans())
def test_a_damaged_pca_matrix_is_an_error_naming_the_file(graph_mode, tmp_path_factory, pca_file, how, sidecar):
    """Any truncation or flipped bytes: with the .sha256 DimReduce wrote, always an error naming the file; without
    it (a matrix from elsewhere), an error naming the file or, when the damage left a well-formed finite matrix of
    the right shape, that matrix."""
    figures.add("damaged files: PCA .npy matrices")
    good = pca_file.read_bytes()
    data = damage(good, *how)
    path = tmp_path_factory.mktemp("damaged") / "pca.npy"
    path.write_bytes(data)
    if sidecar:
        path.with_name("pca.npy.sha256").write_bytes(pca_file.with_name("pca.npy.sha256").read_bytes())
    try:
        build_dim_reduce(path)
    except ValueError as error:
        assert str(path) in str(error)
        return
    assert data == good or not sidecar


@pytest.mark.parametrize("content", ["object", "nan", "complex", "shape"])
def test_a_pca_matrix_that_is_not_plain_finite_numbers_is_refused(graph_mode, tmp_path, content):
    """A pickled object array is refused without being unpickled (np.load(..., allow_pickle=False))."""
    path = tmp_path / "pca.npy"
    matrix = {"object": np.array([{"x": 1}] * 30, dtype=object).reshape(2, 15),
              "nan": np.full((2, 15), np.nan, np.float32), "complex": np.ones((2, 15), np.complex64),
              "shape": np.ones((3, 15), np.float32)}[content]
    np.save(path, matrix, allow_pickle=True)
    with pytest.raises(ValueError, match=str(path)):
        build_dim_reduce(path)


@pytest.mark.slow  # a Hypothesis property
@settings(max_examples=examples(20))
@given(how=damages)
def test_a_damaged_warm_up_checkpoint_is_an_error_naming_the_file(graph_mode, tmp_path_factory, pca_file, how):
    """weight_load_dir checkpoints saved with crc_check=True: any damage is caught, naming the file."""
    figures.add("damaged files: warm-up checkpoints (DimReduce)")
    folder = tmp_path_factory.mktemp("warmup")
    for i, name in enumerate(sorted(os.listdir(pca_file.parent / "ckpt"))):
        data = (pca_file.parent / "ckpt" / name).read_bytes()
        if i == 1:
            ms.save_checkpoint(ms.load_checkpoint(str(pca_file.parent / "ckpt" / name)), str(folder / "crc.ckpt"),
                               crc_check=True)
            intact = (folder / "crc.ckpt").read_bytes()
            data = damage(intact, *how)
            os.remove(folder / "crc.ckpt")
            if data == intact:
                return
        (folder / name).write_bytes(data)
    _, net_with_loss, opt = linear_setup()
    config = dim_reduce_config(None, str(folder))
    try:
        BoostTrainOneStepCell(net_with_loss, opt, boost_config=config)
    except ValueError as error:
        assert "w1.ckpt" in str(error) or "checkpoint(s)" in str(error)
        return
    pytest.fail("a damaged checkpoint was read without error")


# --- the resume checkpoint (examples/train.py's load_resume_state) ------------------------------------------------

@pytest.fixture(scope="module")
def resume_checkpoint(tmp_path_factory):
    """A CRC-checked checkpoint of a whole loss-scaled train cell with accumulation, as ModelCheckpoint writes it."""
    ms.set_context(mode=ms.GRAPH_MODE, device_target="CPU")
    path = tmp_path_factory.mktemp("resume") / "boost-2_6.ckpt"
    cell = scaled_accumulation_cell()
    cell(X, Y)
    ms.save_checkpoint(cell, str(path), append_dict={"epoch_num": 2}, crc_check=True)
    return path


def scaled_accumulation_cell():
    _, net_with_loss, opt = linear_setup("momentum")
    return BoostTrainOneStepWithLossScaleCell(net_with_loss, opt, DynamicLossScaleUpdate(256.0),
                                              boost_config={"boost": {"mode": "manual", "grad_accumulation": True},
                                                            "grad_accumulation": {"grad_accumulation_step": 3}})


def test_the_resume_recipe_loads_every_parameter(graph_mode, resume_checkpoint):
    cell = scaled_accumulation_cell()
    assert example.load_resume_state(cell, str(resume_checkpoint)) == 2
    assert int(cell.update.accumulation_step.asnumpy()) == 1


@pytest.mark.slow  # a Hypothesis property
@settings(max_examples=examples(30))
@given(how=damages)
def test_a_damaged_resume_checkpoint_is_an_error_naming_the_file(graph_mode, tmp_path_factory, resume_checkpoint,
                                                                how):
    data = damage(resume_checkpoint.read_bytes(), *how)
    if data == resume_checkpoint.read_bytes():
        return
    figures.add("damaged files: resume checkpoints")
    path = tmp_path_factory.mktemp("damaged") / "boost-2_6.ckpt"
    path.write_bytes(data)
    with pytest.raises(ValueError, match=str(path)):
        example.load_resume_state(scaled_accumulation_cell(), str(path))


def test_a_checkpoint_of_another_config_is_refused_naming_what_differs(graph_mode, tmp_path):
    _, net_with_loss, opt = linear_setup("momentum")
    plain = BoostTrainOneStepCell(net_with_loss, opt)
    path = tmp_path / "plain-1_1.ckpt"
    ms.save_checkpoint(plain, str(path), append_dict={"epoch_num": 1}, crc_check=True)
    with pytest.raises(ValueError, match=r"does not match the train cell: it misses \['grad_accumulation"):
        example.load_resume_state(scaled_accumulation_cell(), str(path))


# --- config files ---------------------------------------------------------------------------------------------

CONFIGS = sorted((ROOT / "configs").glob("*.json"))


@pytest.mark.slow  # a Hypothesis property
@settings(max_examples=examples(60))
@given(config=st.sampled_from(CONFIGS), how=damages)
def test_a_damaged_config_file_is_a_config_or_an_error_naming_the_file(tmp_path_factory, config, how):
    """Any truncation or flipped bytes of a shipped config: a config (the damage left valid JSON with valid values,
    e.g. a changed digit) or a ValueError naming the file; never another exception."""
    figures.add("damaged files: config files")
    path = tmp_path_factory.mktemp("config") / config.name
    path.write_bytes(damage(config.read_bytes(), *how))
    try:
        BoostConfig.from_file(path)
    except ValueError as error:
        assert str(path) in str(error)


# --- nothing of ours is unpickled -----------------------------------------------------------------------------------

def test_no_file_is_loaded_with_pickle():
    """Every np.load in the package and the examples passes allow_pickle=False; nothing imports pickle."""
    for source in [*(ROOT / "boost_cells").rglob("*.py"), *(ROOT / "examples").glob("*.py")]:
        tree = ast.parse(source.read_text())
        for node in ast.walk(tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                modules = [alias.name for alias in node.names] + [getattr(node, "module", None) or ""]
                assert not any(name.split(".")[0] in ("pickle", "cPickle", "dill", "joblib") for name in modules), \
                    source
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "load" \
                    and isinstance(node.func.value, ast.Name) and node.func.value.id in ("np", "numpy"):
                flags = {kw.arg: kw.value for kw in node.keywords}
                assert "allow_pickle" in flags and isinstance(flags["allow_pickle"], ast.Constant) \
                    and flags["allow_pickle"].value is False, f"{source}:{node.lineno}"
