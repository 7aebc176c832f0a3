"""Two train cells on one Adam (StyleGAN2 lazy regularization): main loss every step, a regularization loss every
2nd step, against a NumPy Adam driven by both losses in the same order; state names that depend on the order of
construction only."""
import gc

import mindspore as ms
import numpy as np
import pytest
from mindspore import Tensor, nn, ops

from boost_cells import BoostTrainOneStepCell, BoostTrainOneStepWithLossScaleCell, DynamicLossScaleUpdate
from tests.helpers import Linear, accumulation, batch, numpy_mse_grads

REG_WEIGHT = 0.5
LR, BETA1, BETA2, EPS = 0.01, 0.9, 0.999, 1e-8
X, Y = batch()
BAD = X.copy()
BAD[1, 2] = np.inf


class OutputPenalty(nn.Cell):
    """The regularization loss: REG_WEIGHT * mean(net(x) ** 2) (y is ignored, so both cells take (x, y))."""

    def __init__(self, net):
        super().__init__(auto_prefix=False)
        self.net = net

    def construct(self, x, y):
        return REG_WEIGHT * ops.mean(self.net(x) ** 2)


def numpy_penalty_grads(w, b, x):
    grad_out = REG_WEIGHT * 2.0 * (x @ w.T + b) / (x.shape[0] * w.shape[0])
    return grad_out.T @ x, grad_out.sum(axis=0)


class NumpyAdam:
    """MindSpore's nn.Adam: m, v moments, bias correction folded into the step size, eps outside the sqrt."""

    def __init__(self, params):
        self.m = [np.zeros_like(p) for p in params]
        self.v = [np.zeros_like(p) for p in params]
        self.t = 0

    def step(self, params, grads):
        self.t += 1
        self.m = [BETA1 * m + (1 - BETA1) * g for m, g in zip(self.m, grads)]
        self.v = [BETA2 * v + (1 - BETA2) * g * g for v, g in zip(self.v, grads)]
        step = LR * np.sqrt(1 - BETA2 ** self.t) / (1 - BETA1 ** self.t)
        return [p - step * m / (np.sqrt(v) + EPS) for p, m, v in zip(params, self.m, self.v)]


def build(scaled, config=None):
    net = Linear()
    opt = nn.Adam(net.trainable_params(), LR, BETA1, BETA2, EPS)
    main_loss, penalty = nn.WithLossCell(net, nn.MSELoss()), OutputPenalty(net)
    if scaled:
        return net, opt, (BoostTrainOneStepWithLossScaleCell(main_loss, opt, DynamicLossScaleUpdate(2.0 ** 10),
                                                             boost_config=config),
                          BoostTrainOneStepWithLossScaleCell(penalty, opt, DynamicLossScaleUpdate(2.0 ** 4),
                                                             boost_config=config))
    return net, opt, (BoostTrainOneStepCell(main_loss, opt, boost_config=config),
                      BoostTrainOneStepCell(penalty, opt, boost_config=config))


# (cell index, poisoned input?) per call: main every step, regularization every 2nd step; with loss scaling one
# regularization step overflows and must change nothing.
SCHEDULE = [(0, False), (0, False), (1, False), (0, False), (0, False), (1, True), (0, False), (1, False)]


@pytest.mark.parametrize("scaled", [False, True], ids=["plain", "loss_scaled"])
def test_both_losses_drive_one_adam_like_numpy(mode, scaled):
    net, opt, cells = build(scaled)
    names = [p.name for p in net.trainable_params()]
    params = [p.asnumpy().astype(np.float64) for p in net.trainable_params()]
    reference = NumpyAdam(params)
    for which, poisoned in SCHEDULE:
        if poisoned and not scaled:
            continue
        out = cells[which](Tensor(BAD if poisoned else X), Tensor(Y))
        if scaled:
            assert bool(out[1].asnumpy()) == poisoned
        if not poisoned:
            grads = numpy_mse_grads(*params, X, Y) if which == 0 else numpy_penalty_grads(*params, X)
            params = reference.step(params, grads)
    for got, want in zip(net.trainable_params(), params):
        np.testing.assert_allclose(got.asnumpy(), want, rtol=2e-5, atol=1e-6)
    for got, want in zip(opt.moment1, reference.m):
        np.testing.assert_allclose(got.asnumpy(), want, rtol=2e-5, atol=1e-7)
    for got, want in zip(opt.moment2, reference.v):
        np.testing.assert_allclose(got.asnumpy(), want, rtol=2e-5, atol=1e-9)
    np.testing.assert_allclose(opt.beta1_power.asnumpy(), BETA1 ** reference.t, rtol=1e-6)
    assert [p.name for p in net.trainable_params()] == names == ["fc.weight", "fc.bias"]


@pytest.mark.parametrize("scaled, config", [(True, None), (True, accumulation(2)), (False, accumulation(2))])
def test_one_optimizer_state_and_distinct_names(scaled, config):
    net, opt, (main, reg) = build(scaled, config)
    optimizer_state = {id(p) for p in opt.get_parameters()}
    params = {}
    for cell in (main, reg):
        cell_params = list(cell.get_parameters())
        assert optimizer_state <= {id(p) for p in cell_params}  # the same Parameters, not copies
        for param in cell_params:
            assert params.setdefault(param.name, param) is param, f"two Parameters named {param.name}"
    main_own, reg_own = ([p.name for p in cell.get_parameters() if id(p) not in optimizer_state]
                         for cell in (main, reg))
    assert main_own and reg_own == ["share1." + name for name in main_own]
    assert main.state_prefix == "" and reg.state_prefix == "share1."
    assert [p.name for p in opt.parameters] == ["fc.weight", "fc.bias"]


class LazyRegularizationStep(nn.Cell):
    """A parent cell holding both train cells: one call runs the main step, then the regularization step."""

    def __init__(self, main, reg):
        super().__init__(auto_prefix=False)
        self.main = main
        self.reg = reg

    def construct(self, x, y):
        first = self.main(x, y)
        return first, self.reg(ops.depend(x, first[0]), y)


def test_a_parent_cell_holding_both_renames_nothing(mode, tmp_path):
    """Before the fix both cells' 'scale_sense' made MindSpore rename every parameter of the parent cell. One
    checkpoint of the parent holds each Parameter once, under its own name."""
    net, _, cells = build(True)
    both = LazyRegularizationStep(*cells)
    separate_net, _, separate = build(True)
    for _ in range(2):
        both(Tensor(X), Tensor(Y))
        for cell in separate:
            cell(Tensor(X), Tensor(Y))
    assert [p.name for p in net.trainable_params()] == ["fc.weight", "fc.bias"]
    assert {"scale_sense", "share1.scale_sense"} <= {p.name for p in both.get_parameters()}
    for got, want in zip(net.trainable_params(), separate_net.trainable_params()):
        np.testing.assert_allclose(got.asnumpy(), want.asnumpy(), rtol=1e-6)
    ms.save_checkpoint(both, str(tmp_path / "both.ckpt"))
    saved = ms.load_checkpoint(str(tmp_path / "both.ckpt"))
    assert {"fc.weight", "moment1.fc.weight", "beta1_power", "scale_sense", "share1.scale_sense",
            "loss_scale.clean_steps", "share1.loss_scale.clean_steps"} <= set(saved)
    np.testing.assert_array_equal(saved["share1.scale_sense"].asnumpy(), cells[1].scale_sense.asnumpy())


def test_names_follow_construction_order_whatever_the_garbage_collector_freed(tmp_path):
    """The share index counts the train cells built on an optimizer object: a cell built after an earlier one was
    freed still gets the next index, so a second run that builds the same cells in the same order gets the same
    names and loads its own checkpoint, whether or not the collector ran in between."""
    def run(collect):
        net = Linear()
        opt = nn.Adam(net.trainable_params(), LR, BETA1, BETA2, EPS)
        main_loss = nn.WithLossCell(net, nn.MSELoss())
        first = BoostTrainOneStepWithLossScaleCell(main_loss, opt, DynamicLossScaleUpdate(2.0 ** 10))
        del first
        if collect:
            gc.collect()
        second = BoostTrainOneStepWithLossScaleCell(OutputPenalty(net), opt, DynamicLossScaleUpdate(2.0 ** 4))
        return second

    saved = run(collect=False)
    assert saved.state_prefix == "share1."
    saved(Tensor(BAD), Tensor(Y))  # an overflow: the scale halves
    ms.save_checkpoint(saved, str(tmp_path / "run.ckpt"))
    resumed = run(collect=True)
    assert resumed.state_prefix == "share1."
    assert [p.name for p in resumed.get_parameters()] == [p.name for p in saved.get_parameters()]
    not_loaded, _ = ms.load_param_into_net(resumed, ms.load_checkpoint(str(tmp_path / "run.ckpt")))
    assert not_loaded == []
    assert float(resumed.scale_sense.asnumpy()) == float(saved.scale_sense.asnumpy()) == 2.0 ** 3
