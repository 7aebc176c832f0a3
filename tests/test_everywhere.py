"""The train cells where MindSpore runs them: nested in another Cell's graph (dataset sink mode), subclassed with
their own ``construct`` (model-zoo YOLO ports), and per pair inside the GAN cell; host-only features refuse to
run where they cannot."""
import numpy as np
import mindspore as ms
import pytest
from mindspore import Parameter, ParameterTuple, Tensor, nn, ops
from mindspore.boost import BoostTrainOneStepCell as ReferenceCell
from mindspore.common import dtype as mstype
from mindspore.ops import functional as F

import boost_cells
from boost_cells import (BoostTrainOneStepCell, BoostTrainOneStepWithLossScaleCell, DynamicLossScaleUpdate,
                         MultiOptimizerTrainOneStepCell)
from tests.helpers import (GROUP_STARTS, DataWrapperStandIn, NumpyOptimizer, Named, TanhMLP, accumulation, batch, data,
                           freeze_config, linear_setup, mlp_setup, numpy_mlp_grads, numpy_mse_grads, state)


def assert_same_state(a, b):
    state_a, state_b = state(a), state(b)
    assert sorted(state_a) == sorted(state_b)
    for name, value in state_a.items():
        assert np.array_equal(value, state_b[name]), name


@pytest.mark.slow  # a run per way of calling the cell
@pytest.mark.parametrize("loss_scaled", [False, True], ids=["plain", "loss_scaled"])
def test_freezing_nested_in_a_cell_equals_a_direct_call(mode, loss_scaled):
    """Called from another Cell's construct (sink mode's wrapper), a freezing cell freezes exactly as when called
    directly: same weights, optimizer state and schedule position after every step, and the front groups really
    stay frozen on the steps the schedule freezes."""
    config = freeze_config(freeze_p=0.5)

    def build():
        _, net_with_loss, opt = mlp_setup()
        if loss_scaled:
            return BoostTrainOneStepWithLossScaleCell(net_with_loss, opt, DynamicLossScaleUpdate(1024.0, window=2),
                                                      boost_config=config)
        return BoostTrainOneStepCell(net_with_loss, opt, boost_config=config)

    direct, nested = build(), build()
    wrapper = DataWrapperStandIn(nested)
    names = [p.name for p in direct.network.trainable_params()]
    for step in range(5):
        index = direct.train_step.current_index()
        assert nested.train_step.current_index() == index
        before = state(direct)
        direct(*data(step))
        wrapper(*data(step))
        assert_same_state(direct, nested)
        after = state(direct)
        for j, name in enumerate(names):
            assert np.array_equal(before[name], after[name]) == (j < GROUP_STARTS[index]), (step, name)
    assert int(direct.train_step.schedule.position.asnumpy()) == 5


def test_host_hook_refuses_to_compile_nested(graph_mode, tmp_path):
    """The first-overflow report needs the host around each step; compiled inside another Cell's graph it cannot
    run, so the nested call raises, naming the feature, instead of silently writing nothing."""
    _, net_with_loss, opt = linear_setup("momentum")
    cell = BoostTrainOneStepWithLossScaleCell(net_with_loss, opt, Tensor(8.0),
                                              overflow_report=str(tmp_path / "overflow.json"))
    x, y = (Tensor(a) for a in batch())
    cell(x, y)
    with pytest.raises(RuntimeError, match="FirstOverflowReporter.*dataset sink mode"):
        DataWrapperStandIn(cell)(x, y)


def test_host_hook_runs_nested_in_pynative(tmp_path):
    """In PYNATIVE_MODE a nested call goes through the train cell's own call, so the host hook runs: a planted
    overflow writes the report."""
    ms.set_context(mode=ms.PYNATIVE_MODE, device_target="CPU")
    _, net_with_loss, opt = linear_setup("momentum")
    path = tmp_path / "overflow.json"
    cell = BoostTrainOneStepWithLossScaleCell(net_with_loss, opt, Tensor(8.0), overflow_report=str(path))
    x, y = batch()
    x[0, 0] = np.inf
    _, overflow, _ = DataWrapperStandIn(cell)(Tensor(x), Tensor(y))
    assert bool(overflow.asnumpy()) and path.exists()


def test_model_refuses_sink_mode_with_a_host_feature(monkeypatch, tmp_path):
    """``boost_cells.Model.train(..., dataset_sink_mode=True)`` with a host-only feature raises on GPU and Ascend,
    where sink mode really runs the train cell nested. Stand-in: there is no GPU here, so the device target the
    check reads is patched to "GPU"; the dataset is never touched because the check comes first."""
    net = nn.Dense(4, 3)
    model = boost_cells.Model(net, nn.MSELoss(), nn.Momentum(net.trainable_params(), 0.1, 0.9), metrics={"mse"},
                              boost_config_dict={"loss_scale": {"type": "static", "init": 8.0},
                                                 "diagnostics": {"overflow_report": str(tmp_path / "o.json")}})
    monkeypatch.setattr(boost_cells.model, "device_target", lambda: "GPU")
    with pytest.raises(ValueError, match="dataset_sink_mode.*FirstOverflowReporter"):
        model.train(1, None, dataset_sink_mode=True)


# ---------------------------------------------------------------- a YOLOv7-style subclass


_blend = ops.MultitypeFuncGraph("blend")


@_blend.register("Number", "Tensor", "Tensor")
def _blend_tensor(decay, average, weight):
    return ops.assign(average, decay * average + (1 - decay) * weight)


class EMA(nn.Cell):
    """Exponential moving average of the weights, updated on every call of ``update()``, as the YOLO ports' EMA:
    ``ema = decay * ema + (1 - decay) * weight``; ``ema.updates`` counts the calls."""

    def __init__(self, weights, decay=0.5):
        super().__init__()
        self.decay = decay
        self.weights = ParameterTuple(weights)
        self.ema = ParameterTuple(Parameter(Tensor(w.asnumpy()), name="ema." + w.name, requires_grad=False)
                                  for w in weights)
        self.updates = Parameter(Tensor(0, mstype.int32), name="ema.updates", requires_grad=False)
        self.hyper_map = ops.HyperMap()

    def update(self):
        return F.depend(ops.assign_add(self.updates, Tensor(1, mstype.int32)),
                        self.hyper_map(ops.partial(_blend, self.decay), self.ema, self.weights))


def yolo_style(base):
    """A subclass of ``base`` whose ``construct`` is the one the MindSpore YOLOv7 port writes: the freeze,
    accumulation, DimReduce, AdaSum and plain branches of the reference, then the EMA update on every step."""

    class YoloTrainOneStepCell(base):
        def __init__(self, network, optimizer, ema, sens=1.0, **kwargs):
            super().__init__(network, optimizer, sens, **kwargs)
            self.ema = ema

        def construct(self, *inputs):
            if self.freeze:
                loss = self.gradient_freeze_process(*inputs)
            else:
                loss = self.network(*inputs)
                sens = F.fill(loss.dtype, loss.shape, self.sens)
                grads = self.grad(self.network, self.weights)(*inputs, sens)
                grads = self.grad_reducer(grads)
                if self.use_grad_accumulation:
                    loss = self.gradient_accumulation_process(loss, grads, sens, *inputs)
                else:
                    if self.enable_dim_reduce:
                        loss = F.depend(loss, self.dim_reduce(loss, grads, sens, self.weights, self.weights_clone,
                                                              *inputs))
                    elif self.enable_adasum:
                        loss = F.depend(loss, self.adasum_process(loss, grads))
                    else:
                        loss = F.depend(loss, self.optimizer(grads))
            loss = F.depend(loss, self.ema.update())
            return loss

    return YoloTrainOneStepCell


def numpy_ema(ema, params, decay=0.5):
    return [decay * e + (1 - decay) * p for e, p in zip(ema, params)]


def test_yolo_subclass_is_a_train_one_step_cell():
    _, net_with_loss, opt = linear_setup("momentum")
    cell = yolo_style(BoostTrainOneStepCell)(net_with_loss, opt, EMA(opt.parameters), boost_config={"level": "O0"})
    assert isinstance(cell, nn.TrainOneStepCell)
    for name in ("network", "optimizer", "weights", "grad", "sens", "grad_reducer", "reducer_flag", "hyper_map"):
        assert hasattr(cell, name), name
    assert (cell.freeze, cell.use_grad_accumulation, cell.enable_adasum, cell.enable_dim_reduce) == (False,) * 4
    assert not cell.check_adasum_enable() and not cell.check_dim_reduce_enable()


def test_yolo_subclass_at_o0_equals_the_reference(graph_mode):
    """At O0 the subclass trains exactly as the same subclass of ``mindspore.boost.BoostTrainOneStepCell``: the
    same losses, weights, moments and EMA, bit for bit."""
    cells = []
    for base in (BoostTrainOneStepCell, ReferenceCell):
        _, net_with_loss, opt = linear_setup("momentum")
        kwargs = {"boost_config": {"level": "O0"}} if base is BoostTrainOneStepCell else {}
        cells.append(yolo_style(base)(net_with_loss, opt, EMA(opt.parameters), **kwargs))
    for seed in range(4):
        inputs = [Tensor(a) for a in batch(seed=seed)]
        losses = [cell(*inputs).asnumpy() for cell in cells]
        assert np.array_equal(*losses)
    ours, reference = ({p.name: p.asnumpy() for p in cell.get_parameters()} for cell in cells)
    assert set(ours) <= set(reference)  # the reference also holds unused state (accumulation_step, sync_tensor...)
    for name, value in ours.items():
        assert np.array_equal(value, reference[name]), name
    assert int(ours["ema.updates"]) == 4


def test_yolo_subclass_with_accumulation_matches_numpy(mode):
    """With accumulation over 2 micro-steps the subclass's own branch (``grad_reducer`` then
    ``gradient_accumulation_process``) applies the mean gradient every second call; its EMA runs on every call."""
    _, net_with_loss, opt = linear_setup("momentum")
    ema = EMA(opt.parameters)
    cell = yolo_style(BoostTrainOneStepCell)(net_with_loss, opt, ema, boost_config=accumulation(2))
    params = [p.asnumpy().astype(np.float64) for p in opt.parameters]
    averages = [p.copy() for p in params]
    numpy_opt, sums = NumpyOptimizer(0.1, 0.9), [0, 0]
    for seed in range(4):
        x, y = batch(seed=seed)
        cell(Tensor(x), Tensor(y))
        sums = [s + g for s, g in zip(sums, numpy_mse_grads(*params, x.astype(np.float64), y.astype(np.float64)))]
        if seed % 2 == 1:
            params, sums = numpy_opt.step(params, [s / 2 for s in sums]), [0, 0]
        averages = numpy_ema(averages, params)
    for got, want in zip(opt.parameters, params):
        np.testing.assert_allclose(got.asnumpy(), want, rtol=1e-5, atol=1e-6)
    for got, want in zip(ema.ema, averages):
        np.testing.assert_allclose(got.asnumpy(), want, rtol=1e-5, atol=1e-6)
    assert int(ema.updates.asnumpy()) == 4


def test_yolo_subclass_with_freezing_runs_its_ema_on_frozen_steps(mode):
    """With gradient freezing the subclass's ``gradient_freeze_process`` trains the scheduled suffix (selected in
    the graph), and its own EMA still runs on every step, frozen ones included: NumPy reference of both."""
    net, net_with_loss, opt = mlp_setup(lr=0.1)
    ema = EMA(opt.parameters)
    cell = yolo_style(BoostTrainOneStepCell)(net_with_loss, opt, ema, boost_config=freeze_config(freeze_p=0.5))
    assert cell.freeze
    params = [p.asnumpy().astype(np.float64) for p in net.trainable_params()]
    velocity = [np.zeros_like(p) for p in params]
    averages = [p.copy() for p in params]
    indices = []
    for step in range(5):
        index = cell.train_step.current_index()
        indices.append(index)
        inputs = data(step)
        cell(*inputs)
        grads = numpy_mlp_grads(params, *(t.asnumpy().astype(np.float64) for t in inputs))
        for j in range(GROUP_STARTS[index], len(params)):
            velocity[j] = 0.9 * velocity[j] + grads[j]
            params[j] = params[j] - 0.1 * velocity[j]
        averages = numpy_ema(averages, params)
    assert indices == [0, 0, 1, 2, 0]
    for got, want in zip(net.trainable_params(), params):
        np.testing.assert_allclose(got.asnumpy(), want, rtol=2e-5, atol=2e-6)
    for got, want in zip(ema.ema, averages):
        np.testing.assert_allclose(got.asnumpy(), want, rtol=2e-5, atol=2e-6)
    assert int(ema.updates.asnumpy()) == 5


def test_documented_methods_refuse_when_their_feature_is_off():
    _, net_with_loss, opt = linear_setup("momentum")
    cell = BoostTrainOneStepCell(net_with_loss, opt, boost_config={"level": "O0"})
    with pytest.raises(ValueError, match="gradient_accumulation_process.*accumulation on"):
        cell.gradient_accumulation_process(None, (), None)
    with pytest.raises(ValueError, match="adasum_process.*AdaSum on"):
        cell.adasum_process(None, ())


def test_loss_scale_subclass_keeps_the_references_attributes(mode):
    """A subclass of the loss-scale cell finds ``scale_sense``, ``loss_scaling_manager`` and the reference's overflow
    methods, and a construct written with them skips a planted overflow and lowers the scale."""

    class Custom(BoostTrainOneStepWithLossScaleCell):
        def construct(self, *inputs):
            loss = self.network(*inputs)
            scaling_sens = self.scale_sense
            status, sens = self._start_overflow_check(loss, ops.ones_like(loss) * scaling_sens)
            grads = self.grad(self.network, self.weights)(*inputs, sens)
            grads = self.hyper_map(F.partial(ops.mul, 1 / scaling_sens), grads)
            cond = self._get_overflow_status(status, grads)
            overflow = self._process_loss_scale(cond)
            if not overflow:
                loss = F.depend(loss, self.optimizer(grads))
            return loss, cond, scaling_sens

    _, net_with_loss, opt = linear_setup("momentum")
    policy = DynamicLossScaleUpdate(64.0, window=100)
    cell = Custom(net_with_loss, opt, policy, boost_config={"level": "O0"})
    assert cell.loss_scaling_manager is policy
    x, y = batch()
    x[0, 0] = np.inf
    weights = [p.asnumpy().copy() for p in opt.parameters]
    _, cond, _ = cell(Tensor(x), Tensor(y))
    assert bool(cond.asnumpy()) and float(cell.scale_sense.asnumpy()) == 32.0
    assert all(np.array_equal(w, p.asnumpy()) for w, p in zip(weights, opt.parameters))


# ---------------------------------------------------------------- the GAN cell, per pair


def two_mlp_pairs():
    """Two independent pairs over TanhMLPs with distinct names (3 freezing layers each) and a Momentum each."""
    nets = [Named("a", TanhMLP(seed=0)), Named("b", TanhMLP(seed=1))]
    return nets, [(nn.WithLossCell(net, nn.MSELoss()), nn.Momentum(net.trainable_params(), 0.1, 0.9))
                  for net in nets]


O1_WITHOUT_LESS_BN = {"level": "O1", "boost": {"mode": "manual", "less_bn": False},
                      "grad_freeze": {"param_groups": 3, "freeze_type": 0, "freeze_p": 0.5, "total_steps": 10}}


def test_gan_cell_refuses_what_cannot_apply_per_pair():
    _, pairs = two_mlp_pairs()
    with pytest.raises(ValueError, match="'less_bn'"):
        MultiOptimizerTrainOneStepCell(pairs, Tensor(8.0), boost_config={"level": "O1"})
    with pytest.raises(ValueError, match="'grad_freeze'.*shared_overflow=True"):
        MultiOptimizerTrainOneStepCell(pairs, Tensor(8.0), True, boost_config=O1_WITHOUT_LESS_BN)


@pytest.mark.slow  # a GAN cell and a control cell per pair, over the schedule
def test_gan_cell_freezes_per_pair(mode):
    """Under O1 (its LessBN switched off, which the GAN cell refuses) each pair freezes by its own network's groups
    and schedule, exactly as a loss-scaled train cell with the same config on that pair alone."""
    nets, pairs = two_mlp_pairs()
    cell = MultiOptimizerTrainOneStepCell(pairs, [Tensor(8.0), Tensor(8.0)], boost_config=O1_WITHOUT_LESS_BN)
    control_nets, control_pairs = two_mlp_pairs()
    controls = [BoostTrainOneStepWithLossScaleCell(*pair, Tensor(8.0), boost_config=O1_WITHOUT_LESS_BN)
                for pair in control_pairs]
    fronts = []
    for step in range(4):
        inputs = data(step)
        front = nets[0].trainable_params()[0].asnumpy().copy()
        cell(*inputs)
        for control in controls:
            control(*inputs)
        fronts.append(np.array_equal(front, nets[0].trainable_params()[0].asnumpy()))
        for net, control_net in zip(nets, control_nets):
            for got, want in zip(net.trainable_params(), control_net.trainable_params()):
                assert np.array_equal(got.asnumpy(), want.asnumpy()), (step, got.name)
    assert fronts == [False, False, True, True]  # strategy 0, 0, 1, 2: the first layer trains on full steps only
    names = sorted(p.name for p in cell.get_parameters())
    assert "pair0.grad_freeze.position" in names and "pair1.grad_freeze.position" in names
