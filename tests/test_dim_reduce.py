"""DimReduce against NumPy references: the PCA matrix, projection and back-projection, the BFGS update and
its skip, the line-search decision, full steps (with and without loss scaling, a planted overflow), checkpoint
resume, 2-worker data parallelism, the config rules and the errors."""
import os

import numpy as np
import mindspore as ms
import pytest
from mindspore import Parameter, Tensor, nn, ops

from boost_cells import AutoBoost, BoostConfig, BoostConfigWarning, BoostTrainOneStepCell, \
    BoostTrainOneStepWithLossScaleCell, DimReduce, FreezeOpt, build_train_network
from boost_cells.updates.dim_reduce import bfgs
from boost_cells.updates.pca import load_trajectory, pca_matrix, randomized_pca
from tests.helpers import HUGE, Linear, NumpyDimReduce, batch, linear_setup, numpy_mse_grads, numpy_mse_loss
from tests.launch import ROOT, msrun

N_COMPONENTS = 4
WARMUP_STEPS = 8
WORKER = ROOT / "tests" / "distributed" / "dim_reduce_worker.py"


def config(ckpt_dir=None, pca_mat_path=None, n_components=N_COMPONENTS, **extra):
    section = {"weight_load_dir": None if ckpt_dir is None else str(ckpt_dir), "n_components": n_components,
               "pca_mat_path": None if pca_mat_path is None else str(pca_mat_path)}
    return {"boost": {"mode": "manual", "dim_reduce": True}, "dim_reduce": section, **extra}


def save_trajectory(folder, net, net_with_loss, opt, steps=WARMUP_STEPS, seed=100):
    """Warm-up: ``steps`` plain steps, a checkpoint of ``net`` after each."""
    folder.mkdir(parents=True, exist_ok=True)
    cell = nn.TrainOneStepCell(net_with_loss, opt)
    for step in range(steps):
        x, y = batch(seed=seed + step)
        cell(Tensor(x), Tensor(y))
        ms.save_checkpoint(net, str(folder / f"step{step:02d}.ckpt"))
    return folder


@pytest.fixture(scope="module")
def warmup(tmp_path_factory):
    """A directory of WARMUP_STEPS checkpoints of the Linear net (Momentum, lr 0.05) from its seed-0 start."""
    ms.set_context(mode=ms.PYNATIVE_MODE, device_target="CPU")
    net, net_with_loss, opt = linear_setup("momentum", lr=0.05)
    return save_trajectory(tmp_path_factory.mktemp("warmup"), net, net_with_loss, opt)


def flat(net):
    return np.concatenate([p.asnumpy().ravel() for p in net.trainable_params()]).astype(np.float64)


def mse_loss_fn(x, y):
    return lambda w: numpy_mse_loss(w[:12].reshape(3, 4), w[12:], x, y)


def mse_grad(w, x, y):
    return np.concatenate([g.ravel() for g in numpy_mse_grads(w[:12].reshape(3, 4), w[12:], x, y)])


def test_pca_equals_exact_svd_of_centred_trajectory(warmup):
    weights = Linear().trainable_params()
    data = load_trajectory(str(warmup), weights)
    assert data.shape == (WARMUP_STEPS, 15)
    section = BoostConfig.from_dict(config(warmup)).section("dim_reduce")
    pca = pca_matrix(section, weights)
    _, _, exact = np.linalg.svd(data - data.mean(axis=0), full_matrices=False)
    np.testing.assert_allclose(np.abs(pca @ exact[:N_COMPONENTS].T), np.eye(N_COMPONENTS), atol=1e-5)
    np.testing.assert_allclose(pca @ pca.T, np.eye(N_COMPONENTS), atol=1e-6)
    np.testing.assert_array_equal(pca, pca_matrix(section, weights))  # deterministic


def test_randomized_pca_finds_top_directions_of_wide_data():
    """More samples than components + oversampling: the range finder is not exact, the power iterations are."""
    rng = np.random.default_rng(3)
    basis = np.linalg.qr(rng.standard_normal((200, 5)))[0].T
    data = (rng.standard_normal((60, 5)) * [50, 20, 10, 5, 3]) @ basis + 0.01 * rng.standard_normal((60, 200))
    _, _, exact = np.linalg.svd(data - data.mean(axis=0), full_matrices=False)
    for seed in (0, 1):
        found = randomized_pca(data, 3, seed, oversample=2)
        np.testing.assert_allclose(np.abs(found @ exact[:3].T), np.eye(3), atol=1e-6)
        assert np.all(found[np.arange(3), np.argmax(np.abs(found), axis=1)] > 0)


def test_full_steps_equal_numpy_with_projection_residual(mode, warmup):
    """Four steps on one batch of the Linear net (convex: y.s > 0, so B updates): weights, B, s and the residual
    momentum follow NumpyDimReduce; after the first step the momentum is exactly the back-projection residual
    g - P^T P g, orthogonal to P's rows."""
    net, net_with_loss, opt = linear_setup("momentum")
    cell = BoostTrainOneStepCell(net_with_loss, opt, boost_config=config(warmup))
    pca = cell.update.pca.asnumpy()
    ref = NumpyDimReduce(pca)
    w = flat(net)
    for step in range(4):
        x, y = batch(seed=20)
        g = mse_grad(w, x, y)
        expected_loss = mse_loss_fn(x, y)(w)
        w = ref.step(mse_loss_fn(x, y), w, g)
        loss = cell(Tensor(x), Tensor(y))
        np.testing.assert_allclose(loss.asnumpy(), expected_loss, rtol=1e-5)
        np.testing.assert_allclose(flat(net), w, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(cell.update.bk.asnumpy(), ref.bk, rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(cell.update.sk.asnumpy().ravel(), ref.sk, rtol=1e-4, atol=1e-6)
        momentum = np.concatenate([m.asnumpy().ravel() for m in cell.update.momentum])
        np.testing.assert_allclose(momentum, ref.momentum, rtol=1e-5, atol=1e-6)
        if step == 0:
            np.testing.assert_allclose(momentum, g - pca.T @ (pca @ g), rtol=1e-5, atol=1e-6)
            np.testing.assert_allclose(pca @ momentum, 0, atol=1e-6)
    assert ref.steps[0] > 0 and not np.allclose(ref.bk, np.eye(N_COMPONENTS))  # the BFGS update really ran


class Quadratic(nn.Cell):
    """loss = 0.5 sum(h (w - t)^2): with P = I and B = I the first trial step w - g lands at w - h (w - t)."""

    def __init__(self):
        super().__init__()
        self.w = Parameter(Tensor(np.array([1.0, -2.0, 0.5], np.float32)), name="w")

    def construct(self, target, curvature):
        return 0.5 * ops.reduce_sum(curvature * (self.w - target) ** 2)


def test_line_search_decision_equals_numpy(mode, tmp_path):
    """Curvature 3: both 1 and rho fail (no subspace step, B/s/g_last kept); 2: rho^0 fails, rho^1 passes;
    then 1 with the updated B: as NumpyDimReduce decides."""
    np.save(tmp_path / "eye.npy", np.eye(3, dtype=np.float32))
    net = Quadratic()
    cell = BoostTrainOneStepCell(net, nn.SGD([net.w], learning_rate=0.1),
                                 boost_config=config(pca_mat_path=tmp_path / "eye.npy", n_components=3))
    ref = NumpyDimReduce(np.eye(3))
    target = np.array([0.0, 1.0, 2.0])
    w = net.w.asnumpy().astype(np.float64)
    for h in (3.0, 2.0, 1.0):
        loss_fn = lambda v, h=h: 0.5 * float(np.sum(h * (v - target) ** 2))  # noqa: E731
        w = ref.step(loss_fn, w, h * (w - target))
        cell(Tensor(target, ms.float32), Tensor(np.full(3, h), ms.float32))
        np.testing.assert_allclose(net.w.asnumpy(), w, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(cell.update.sk.asnumpy().ravel(), ref.sk, rtol=1e-5, atol=1e-6)
        assert bool(cell.update.has_last.asnumpy()) == ref.has_last
    assert ref.steps[:2] == [0.0, 0.55] and ref.steps[2] > 0


def test_bfgs_update_and_skip():
    """B from (s, y): the BFGS formula (and the secant condition B y = s) when y.s > eps; B unchanged when
    y.s <= eps or before the first accepted step."""
    ms.set_context(mode=ms.PYNATIVE_MODE, device_target="CPU")
    rng = np.random.default_rng(0)
    start = rng.standard_normal((3, 3))
    start = (start @ start.T + np.eye(3)).astype(np.float32)
    ref = NumpyDimReduce(np.eye(3))
    ref.bk, ref.gk_last, ref.sk = start.astype(np.float64), np.array([1.0, 0.0, 2.0]), np.array([0.5, -1.0, 0.25])
    column = lambda v: Tensor(np.asarray(v, np.float32)[:, None])  # noqa: E731
    cases = (([2.0, -1.0, 2.5], 1.625), ([3.0, 1.0, 2.0], 0.0), ([1.0, 0.5, 2.0], -0.5))  # (g_k, y.s)
    for has_last in (False, True):
        ref.has_last = has_last
        for gk, ys in cases:
            gk = np.array(gk)
            assert float((gk - ref.gk_last) @ ref.sk) == ys
            got = bfgs(Tensor(start), column(ref.gk_last), column(ref.sk), Tensor(has_last), column(gk)).asnumpy()
            np.testing.assert_allclose(got, ref.bfgs(gk), rtol=1e-5, atol=1e-6)
            if has_last and ys > 0:
                np.testing.assert_allclose(got @ (gk - ref.gk_last), ref.sk, rtol=1e-5, atol=1e-6)
            else:
                np.testing.assert_array_equal(got, start)


def state(cell, net):
    """Everything a DimReduce step may change: the weights and every DimReduce Parameter."""
    values = {p.name: p.asnumpy().copy() for p in net.trainable_params()}
    values.update({p.name: p.asnumpy().copy() for p in cell.update.get_parameters()
                   if p.name.startswith("dim_reduce.")})
    return values


def test_loss_scaled_equals_numpy_and_overflow_changes_nothing(mode, warmup):
    """A fixed scale of 2**10 gives the unscaled steps; an inf in the batch of step 1 changes no weight, no BFGS
    state and no momentum, and the next clean step goes on as if step 1 never happened."""
    net, net_with_loss, opt = linear_setup("momentum")
    cell = build_train_network(net_with_loss, opt, config(warmup, loss_scale={"type": "static", "init": 1024.0}))
    assert isinstance(cell, BoostTrainOneStepWithLossScaleCell) and isinstance(cell.update, DimReduce)
    ref = NumpyDimReduce(cell.update.pca.asnumpy())
    w = flat(net)
    for step in range(3):
        x, y = batch(seed=30 + step)
        if step == 1:
            before = state(cell, net)
            x[0, 0] = np.inf
            _, overflow, _ = cell(Tensor(x), Tensor(y))
            assert bool(overflow.asnumpy())
            after = state(cell, net)
            assert before.keys() == after.keys() and len(after) == 2 + 4 + 2 * 2
            for name, value in before.items():
                np.testing.assert_array_equal(after[name], value, err_msg=name)
            continue
        w = ref.step(mse_loss_fn(x, y), w, mse_grad(w, x, y))
        _, overflow, _ = cell(Tensor(x), Tensor(y))
        assert not bool(overflow.asnumpy())
        np.testing.assert_allclose(flat(net), w, rtol=1e-5, atol=1e-6)


@pytest.mark.slow  # a whole run and its resumed half, compared
def test_checkpoint_mid_run_resumes_identically(warmup, tmp_path):
    """Two steps, a checkpoint of the train cell (BFGS state and momentum included), a fresh network and cell
    loaded from it, two more steps: bit-identical to four uninterrupted steps; the network's own parameter names
    are unchanged, so the checkpoint loads strictly into the plain network too."""
    ms.set_context(mode=ms.GRAPH_MODE, device_target="CPU")
    batches = [tuple(map(Tensor, batch(seed=40 + step))) for step in range(4)]
    runs = []
    for interrupted in (False, True):
        net, net_with_loss, opt = linear_setup("momentum")
        cell = BoostTrainOneStepCell(net_with_loss, opt, boost_config=config(warmup))
        for x, y in batches[:2]:
            cell(x, y)
        if interrupted:
            ms.save_checkpoint(cell, str(tmp_path / "mid.ckpt"))
            net, net_with_loss, opt = linear_setup("momentum", seed=7)
            cell = BoostTrainOneStepCell(net_with_loss, opt, boost_config=config(warmup))
            not_loaded, _ = ms.load_param_into_net(cell, ms.load_checkpoint(str(tmp_path / "mid.ckpt")))
            assert not not_loaded
        for x, y in batches[2:]:
            cell(x, y)
        runs.append(state(cell, net))
    assert runs[0].keys() == runs[1].keys()
    for name, value in runs[0].items():
        np.testing.assert_array_equal(runs[1][name], value, err_msg=name)
    plain = Linear(seed=9)
    not_loaded, _ = ms.load_param_into_net(plain, ms.load_checkpoint(str(tmp_path / "mid.ckpt")), strict_load=True)
    assert not not_loaded


def test_pca_mat_path_is_written_when_missing_and_reused(warmup, tmp_path):
    _, net_with_loss, opt = linear_setup("momentum")
    path = tmp_path / "pca.npy"
    cell = BoostTrainOneStepCell(net_with_loss, opt, boost_config=config(warmup, pca_mat_path=path))
    assert sorted(os.listdir(tmp_path)) == ["pca.npy", "pca.npy.sha256"]  # the matrix and its checksum
    np.testing.assert_array_equal(np.load(path), cell.update.pca.asnumpy())
    again = BoostTrainOneStepCell(net_with_loss, opt, boost_config=config(tmp_path / "gone", pca_mat_path=path))
    np.testing.assert_array_equal(again.update.pca.asnumpy(), np.load(path))


def test_errors_name_the_case(warmup, tmp_path):
    _, net_with_loss, opt = linear_setup("momentum")
    other = tmp_path / "other"
    other.mkdir()
    for seed in (1, 2):
        ms.save_checkpoint(Linear(n_in=5, seed=seed), str(other / f"wide{seed}.ckpt"))
    renamed = tmp_path / "renamed"
    renamed.mkdir()
    ms.save_checkpoint([{"name": "head.weight", "data": Tensor(np.zeros((3, 4), np.float32))}],
                       str(renamed / "a.ckpt"))
    np.save(tmp_path / "small.npy", np.zeros((N_COMPONENTS, 7), np.float32))
    cases = [
        (config(), "both are null"),
        (config(pca_mat_path=tmp_path / "missing.npy"), "does not exist and no 'dim_reduce.weight_load_dir'"),
        (config(tmp_path / "missing_dir"), "must be an existing directory"),
        (config(warmup, n_components=WARMUP_STEPS), f"holds {WARMUP_STEPS} checkpoint(s), but n_components "
                                                    f"{WARMUP_STEPS} needs at least {WARMUP_STEPS + 1}"),
        (config(other, n_components=1), "has shape (3, 5) but the network's has shape (3, 4): the checkpoints are "
                                        "of another network"),
        (config(renamed, n_components=1), "has no parameter 'fc.weight': the checkpoints are of another network"),
        (config(pca_mat_path=tmp_path / "small.npy"), "has shape (4, 7), but n_components 4 and the network's 15"),
        (config(pca_mat_path=tmp_path / "pca.txt"), "must name a '.npy' file"),
    ]
    for boost_config, message in cases:
        with pytest.raises(ValueError, match="For 'DimReduce', .*" + message.replace("(", r"\(").replace(")", r"\)")):
            BoostTrainOneStepCell(net_with_loss, opt, boost_config=boost_config)
    with pytest.raises(ValueError, match=r"'pca_mat_local' must have shape \(n_components, weight elements\)"):
        DimReduce(net_with_loss, opt, opt.parameters, np.zeros((2, 14)), 2, 0.55, 0.9, 0.001, 0.4, 0, 1)
    with pytest.raises(ValueError, match="'rho' must be a number in"):
        DimReduce(net_with_loss, opt, opt.parameters, np.zeros((2, 15)), 2, 1.5, 0.9, 0.001, 0.4, 0, 1)


def test_config_dim_reduce_alone_and_seed():
    """An explicit combination (manual mode) is resolved as the reference documents it: DimReduce alone, with a
    warning naming what was switched off; the new 'seed' key round-trips."""
    with pytest.warns(BoostConfigWarning, match=r"the other features \['grad_accumulation'\] are switched off"):
        alone = BoostConfig.from_dict({"boost": {"mode": "manual", "dim_reduce": True, "grad_accumulation": True},
                                       "grad_accumulation": {"grad_accumulation_step": 2}})
    assert [name for name, on in alone.features.items() if on] == ["dim_reduce"]
    custom = BoostConfig.from_dict({**config(), "dim_reduce": {"seed": 5}})
    assert custom.section("dim_reduce")["seed"] == 5 and BoostConfig.from_dict(custom.to_dict()) == custom
    with pytest.raises(ValueError, match=r"'dim_reduce.seed' must be an int in \[0, 4294967295\]"):
        BoostConfig.from_dict({"dim_reduce": {"seed": -1}})


def test_autoboost_and_config_less_cell(warmup):
    """``AutoBoost(...).network_auto_process_train`` returns the pair to train (the user's optimizer: DimReduce
    does not use one); a train cell built without ``boost_config`` then runs DimReduce."""
    _, net_with_loss, opt = linear_setup("momentum")
    boost = AutoBoost("O0", config(warmup))
    assert boost.boost_config["dim_reduce"]
    assert boost.network_auto_process_train(net_with_loss, opt) == (net_with_loss, opt)
    try:
        assert isinstance(BoostTrainOneStepCell(net_with_loss, opt).update, DimReduce)
    finally:
        AutoBoost("O0")


@pytest.fixture(scope="module")
def two_workers(tmp_path_factory):
    """One 2-worker msrun job (tests/distributed/dim_reduce_worker.py) on a fresh trajectory."""
    ms.set_context(mode=ms.PYNATIVE_MODE, device_target="CPU")
    root = tmp_path_factory.mktemp("dim_reduce_msrun")
    net, net_with_loss, opt = linear_setup("momentum", lr=0.05)
    ckpt_dir = save_trajectory(root / "ckpt", net, net_with_loss, opt)
    out = root / "out"
    out.mkdir()
    code, output = msrun(2, [WORKER, out, ckpt_dir], root / "logs", timeout=240)
    assert code == 0, output[-3000:]
    return ckpt_dir, {(name, rank): dict(np.load(out / f"{name}_rank{rank}.npz"))
                      for name in ("train", "timeout") for rank in (0, 1)}


@pytest.mark.slow  # an msrun job
def test_two_workers_equal_single_process_on_concatenated_batch(two_workers):
    """Rank r trains on rows [4r, 4r+4) of each 8-row batch: the replicas are bit-identical (weights, PCA matrix,
    B, s) and equal one process on the whole batch (same PCA, same decisions)."""
    from tests.distributed.dim_reduce_worker import STEPS, dim_reduce_config  # pylint: disable=import-outside-toplevel
    ckpt_dir, results = two_workers
    for name, value in results[("train", 0)].items():
        np.testing.assert_array_equal(results[("train", 1)][name], value, err_msg=name)
    ms.set_context(mode=ms.GRAPH_MODE, device_target="CPU")
    net, net_with_loss, opt = linear_setup("momentum")
    cell = BoostTrainOneStepCell(net_with_loss, opt, boost_config=dim_reduce_config(str(ckpt_dir)))
    for step in range(STEPS):
        cell(*map(Tensor, batch(n=8, seed=step)))
    np.testing.assert_array_equal(results[("train", 0)]["pca"], cell.update.pca.asnumpy())
    for p in net.trainable_params():
        np.testing.assert_allclose(results[("train", 0)][p.name], p.asnumpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(results[("train", 0)]["bk"], cell.update.bk.asnumpy(), rtol=1e-4, atol=1e-5)
    assert not np.allclose(results[("train", 0)]["bk"], np.eye(4))


@pytest.mark.slow  # an msrun job
def test_late_rank_gives_a_timeout_error_not_a_hang(two_workers):
    """Rank 1 reaches the PCA all-reduce 2.5 s late; rank 0 (timeout 1 s) raises a clear error; rank 1 still gets
    rank 0's matrix (ones, not its own twos)."""
    _, results = two_workers
    assert "did not all reach the PCA matrix all-reduce within 'dim_reduce.timeout' = 1 s" in \
        str(results[("timeout", 0)]["message"])
    assert str(results[("timeout", 1)]["message"]) == "no error"
    np.testing.assert_array_equal(results[("timeout", 1)]["shared"], np.ones((2, 3)))


def test_dim_reduce_refuses_an_alpha_too_large_for_a_float_and_a_non_finite_matrix(graph_mode):
    """Regression, found by tests/test_constructor_properties.py (alpha=10**400 raised OverflowError) and the
    planted-fault properties (a nan in 'pca_mat_local' was taken and reached every weight)."""
    _, net_with_loss, opt = linear_setup()
    args = (net_with_loss, opt, opt.parameters)
    with pytest.raises(ValueError, match="'alpha' must be"):
        DimReduce(*args, np.zeros((2, 15), np.float32), 2, 0.55, 0.9, HUGE, 0.4, 0, 1)
    matrix = np.zeros((2, 15), np.float32)
    matrix[1, 3] = np.nan
    with pytest.raises(ValueError, match="'pca_mat_local' must hold finite real numbers"):
        DimReduce(*args, matrix, 2, 0.55, 0.9, 0.001, 0.4, 0, 1)


def test_dim_reduce_share_waits_with_a_huge_timeout_instead_of_raising_overflow(monkeypatch):
    """Regression, found by generated configs: dim_reduce.timeout 10**30 (a valid int >= 0) made threading's join
    raise OverflowError; it now waits without a practical bound. (The all-reduce is a stand-in that returns at once:
    a real one needs a data-parallel job.)"""
    from boost_cells.updates import dim_reduce  # pylint: disable=import-outside-toplevel
    monkeypatch.setattr(dim_reduce.ops, "AllReduce", lambda: (lambda tensor: tensor))
    shared = dim_reduce.share_from_rank0(np.ones((2, 3), np.float32), 0, 10 ** 30)
    np.testing.assert_array_equal(shared, np.ones((2, 3), np.float32))


def test_construct_takes_the_reference_argument_list():
    """The reference's call, DimReduce(...)(loss, old_grad, loss_scale, weight, weight_clone, *inputs): gradients
    scaled by loss_scale, already reduced; the clone receives the weights after the step. The construct took
    (loss, grads, *inputs), so such a call handed the scale and the weights to the network as inputs. The same step
    through the strategy's own call, step_reduced(loss, grads, inputs), gives the same weights."""
    x, y = (Tensor(a) for a in batch(seed=20))
    pca = np.linalg.qr(np.random.RandomState(3).randn(15, 2))[0].T.astype(np.float32)
    cells = []
    for _ in range(2):
        net, net_with_loss, opt = linear_setup()
        dim_reduce = DimReduce(net_with_loss, opt, opt.parameters, pca, 2, 0.55, 0.9, 0.001, 0.4, 0, 1)
        loss, grads = ops.value_and_grad(net_with_loss, None, opt.parameters)(x, y)
        cells.append((net, opt, dim_reduce, loss, grads))
    net, opt, dim_reduce, loss, grads = cells[0]
    clone = opt.parameters.clone(prefix="clone", init="zeros")
    scale = Tensor(8.0, ms.float32)
    dim_reduce(loss, tuple(g * 8 for g in grads), scale, opt.parameters, clone, x, y)
    own_net, _, own, own_loss, own_grads = cells[1]
    own.step_reduced(own_loss, own_grads, (x, y))
    for weight, same, cloned in zip(net.trainable_params(), own_net.trainable_params(), clone):
        np.testing.assert_allclose(weight.asnumpy(), same.asnumpy(), rtol=1e-6, atol=1e-7)
        np.testing.assert_array_equal(cloned.asnumpy(), weight.asnumpy())
    assert not np.array_equal(net.trainable_params()[0].asnumpy(), linear_setup()[0].trainable_params()[0].asnumpy())


def test_gradient_freezing_with_dim_reduce_is_refused_naming_both(tmp_path):
    """DimReduce's subspace spans every weight, so it has no suffix step; a FreezeOpt with a DimReduce config used to
    fail with a bare NotImplementedError from the update contract."""
    net, net_with_loss, opt = linear_setup()
    path = tmp_path / "pca.npy"
    np.save(path, np.linalg.qr(np.random.RandomState(3).randn(15, 2))[0].T.astype(np.float32))
    freeze = FreezeOpt(opt, [net.trainable_params()[:1], net.trainable_params()[1:]], [0, 1])
    config = {"boost": {"mode": "manual", "dim_reduce": True}, "dim_reduce": {"n_components": 2,
                                                                             "pca_mat_path": str(path)}}
    with pytest.raises(ValueError, match="gradient freezing cannot train a suffix .* Switch 'grad_freeze' off"):
        BoostTrainOneStepCell(net_with_loss, freeze, boost_config=config)
