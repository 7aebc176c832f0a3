"""The train cells: baseline equality, loss-scaled skip-on-overflow, checkpoints, Model integration, errors."""
import numpy as np
import mindspore as ms
import pytest
from mindspore import Tensor, nn
from mindspore.train import LossMonitor, Model, TimeMonitor
from mindspore.train.callback import CheckpointConfig, ModelCheckpoint

from boost_cells import (BoostTrainOneStepCell, BoostTrainOneStepWithLossScaleCell, DynamicLossScaleUpdate,
                         build_train_network)
from tests.helpers import Halve, Linear, accumulation, batch, linear_setup, weights_of

O0 = {"level": "O0"}


def assert_same_weights(a, b, exact=True):
    wa, wb = weights_of(a), weights_of(b)
    assert wa.keys() == wb.keys()
    for name in wa:
        if exact:
            np.testing.assert_array_equal(wa[name], wb[name], err_msg=name)
        else:
            np.testing.assert_allclose(wa[name], wb[name], rtol=1e-6, atol=1e-7, err_msg=name)


@pytest.mark.parametrize("sens", [None, 1.0])
def test_o0_returns_loss_and_equals_mindspore_cell(mode, sens):
    """The reference returns None without 'sens'; ours returns the loss and trains like nn.TrainOneStepCell."""
    net, net_with_loss, opt = linear_setup("momentum")
    cell = BoostTrainOneStepCell(net_with_loss, opt, sens=sens, boost_config=O0)
    control, control_with_loss, control_opt = linear_setup("momentum")
    control_cell = nn.TrainOneStepCell(control_with_loss, control_opt)
    for seed in range(3):
        x, y = (Tensor(a) for a in batch(seed=seed))
        loss = cell(x, y)
        control_loss = control_cell(x, y)
        assert isinstance(loss, Tensor) and loss.shape == ()
        assert float(loss.asnumpy()) == float(control_loss.asnumpy())
    assert_same_weights(net, control)


def with_halving_reducer(base):
    """A subclass of ``base`` that assigns its own ``grad_reducer`` in ``__init__``, as subclasses of
    ``nn.TrainOneStepCell`` and of the reference's cells do, and keeps ``base``'s ``construct``."""

    class HalvingCell(base):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self.grad_reducer = Halve()

    return HalvingCell


@pytest.mark.parametrize("loss_scaled, config", [(False, O0), (True, accumulation(2))],
                         ids=["plain_o0", "loss_scaled_accumulating"])
def test_assigned_grad_reducer_is_what_construct_applies(mode, loss_scaled, config):
    """A subclass's ``grad_reducer`` is the full step's reduction: halving every gradient under SGD at lr 0.1
    trains as lr 0.05 does (plain, and loss-scaled with accumulation, where it reduces the mean once a cycle)."""
    base = BoostTrainOneStepWithLossScaleCell if loss_scaled else BoostTrainOneStepCell
    scale = (Tensor(4.0),) if loss_scaled else ()
    cells, nets = [], []
    for cls, lr in ((with_halving_reducer(base), 0.1), (base, 0.05)):
        net, net_with_loss, opt = linear_setup("sgd", lr=lr)
        cells.append(cls(net_with_loss, opt, *scale, boost_config=config))
        nets.append(net)
    assert isinstance(cells[0].grad_reducer, Halve) and cells[0].update.grad_reducer is cells[0].grad_reducer
    for seed in range(4):
        inputs = [Tensor(a) for a in batch(seed=seed)]
        for cell in cells:
            cell(*inputs)
    assert_same_weights(*nets, exact=False)


def test_loss_scale_cell_runs_on_cpu_and_skips_overflow(mode):
    """Control model vs scaled model (GradScaler's harness): an inf planted at step 2 of 5 must leave weights and
    optimizer state exactly as a control model that never saw that step, and move the scale exactly."""
    init, factor, window = 16.0, 2.0, 2
    net, net_with_loss, opt = linear_setup("momentum")
    cell = BoostTrainOneStepWithLossScaleCell(net_with_loss, opt, DynamicLossScaleUpdate(init, factor, window),
                                              boost_config=O0)
    control, control_with_loss, control_opt = linear_setup("momentum")
    control_cell = nn.TrainOneStepCell(control_with_loss, control_opt)
    scales, growths, skips, clean_run = [], 0, 0, 0
    for step in range(5):
        x, y = batch(seed=step)
        if step == 2:
            x[0, 0] = np.inf
        loss, overflow, scale = cell(Tensor(x), Tensor(y))
        assert bool(overflow.asnumpy()) == (step == 2)
        if step == 2:
            skips, clean_run = skips + 1, 0
        else:
            control_cell(Tensor(x), Tensor(y))
            clean_run += 1
            if clean_run == window:
                growths, clean_run = growths + 1, 0
        scales.append(float(scale.asnumpy()))
        assert scales[-1] == init * factor ** growths / factor ** skips
    assert scales == [16.0, 32.0, 16.0, 16.0, 32.0]
    # Powers of two scale and unscale exactly, so the scaled model matches the control bit for bit.
    assert_same_weights(net, control)
    np.testing.assert_array_equal(opt.moments[0].asnumpy(), control_opt.moments[0].asnumpy())


@pytest.mark.parametrize("scale_sense", [Tensor(8.0), Tensor([8.0]), nn.FixedLossScaleUpdateCell(8.0),
                                         nn.DynamicLossScaleUpdateCell(8.0, 2, 100)],
                         ids=["scalar", "shape1", "fixed_cell", "mindspore_dynamic"])
def test_scale_sense_forms_train(graph_mode, scale_sense):
    net, net_with_loss, opt = linear_setup()
    control, control_with_loss, control_opt = linear_setup()
    cell = BoostTrainOneStepWithLossScaleCell(net_with_loss, opt, scale_sense, boost_config=O0)
    x, y = (Tensor(a) for a in batch())
    loss, overflow, scale = cell(x, y)
    nn.TrainOneStepCell(control_with_loss, control_opt)(x, y)
    assert not overflow and float(scale.asnumpy().reshape(-1)[0]) == 8.0 and loss.shape == ()
    assert_same_weights(net, control)


class ScaledLinear(nn.Cell):
    """Linear with a learnable scalar gain: a parameter of shape ()."""

    def __init__(self):
        super().__init__()
        self.linear = Linear()
        self.gain = ms.Parameter(Tensor(1.5, ms.float32), name="gain")

    def construct(self, x):
        return self.linear(x) * self.gain


def test_scalar_parameter_keeps_its_shape_under_shape_1_scale(mode):
    net = ScaledLinear()
    net_with_loss = nn.WithLossCell(net, nn.MSELoss())
    cell = BoostTrainOneStepWithLossScaleCell(net_with_loss, nn.SGD(net.trainable_params(), 0.1), Tensor([8.0]),
                                              boost_config=O0)
    cell(*(Tensor(a) for a in batch()))
    assert net.gain.shape == () and float(net.gain.asnumpy()) != 1.5


def test_set_sense_scale(graph_mode):
    _, net_with_loss, opt = linear_setup()
    cell = BoostTrainOneStepWithLossScaleCell(net_with_loss, opt, Tensor(8.0), boost_config=O0)
    cell.set_sense_scale(Tensor(2.0))
    assert float(cell(*(Tensor(a) for a in batch()))[2].asnumpy()) == 2.0
    with pytest.raises(ValueError, match=r"expected a Tensor of shape \(\) or \(1,\)"):
        cell.set_sense_scale(Tensor(np.ones(3, np.float32)))
    for bad in (np.inf, np.nan, 0.0, -1.0):
        with pytest.raises(ValueError, match="must be a finite float32 > 0"):
            cell.set_sense_scale(Tensor(bad))


def test_bad_arguments_are_named():
    _, net_with_loss, opt = linear_setup()
    with pytest.raises(TypeError, match="'network' must be a Cell"):
        BoostTrainOneStepCell(lambda x: x, opt, boost_config=O0)
    with pytest.raises(TypeError, match="'optimizer' must be an optimizer Cell"):
        BoostTrainOneStepCell(net_with_loss, None, boost_config=O0)
    with pytest.raises(ValueError, match=r"shape \(\) or \(1,\)"):
        BoostTrainOneStepWithLossScaleCell(net_with_loss, opt, Tensor(np.ones((2, 2), np.float32)), boost_config=O0)
    with pytest.raises(ValueError, match="'level' must be one of"):
        BoostTrainOneStepCell(net_with_loss, opt, boost_config={"level": "O5"})


def test_checkpoint_loads_strictly_into_plain_network(mode, tmp_path):
    net, net_with_loss, opt = linear_setup("momentum")
    cell = BoostTrainOneStepWithLossScaleCell(
        net_with_loss, opt, DynamicLossScaleUpdate(8.0, window=2),
        boost_config={"boost": {"mode": "manual", "grad_accumulation": True},
                      "grad_accumulation": {"grad_accumulation_step": 2}})
    assert [p.name for p in net.trainable_params()] == ["fc.weight", "fc.bias"]
    for seed in range(3):
        cell(*(Tensor(a) for a in batch(seed=seed)))
    path = str(tmp_path / "boosted.ckpt")
    ms.save_checkpoint(cell, path)
    plain = Linear(seed=5)
    not_loaded, _ = ms.load_param_into_net(plain, ms.load_checkpoint(path), strict_load=True)
    assert not_loaded == []
    assert_same_weights(plain, net)


@pytest.mark.parametrize("with_loss_scale", [False, True], ids=["O0", "loss_scale"])
def test_model_with_callbacks(graph_mode, tmp_path, with_loss_scale):
    net, net_with_loss, opt = linear_setup()
    config = {"level": "O0", **({"loss_scale": {"init": 16.0, "window": 2}} if with_loss_scale else {})}
    train_cell = build_train_network(net_with_loss, opt, config)
    assert isinstance(train_cell, BoostTrainOneStepWithLossScaleCell) == with_loss_scale
    x, y = batch(n=32)
    data = ms.dataset.NumpySlicesDataset({"x": x, "y": y}, shuffle=False).batch(8)
    losses = []

    class Record(LossMonitor):
        def on_train_step_end(self, run_context):
            outputs = run_context.original_args().net_outputs
            losses.append(float((outputs[0] if isinstance(outputs, (tuple, list)) else outputs).asnumpy()))

    checkpoint = ModelCheckpoint("lin", str(tmp_path), CheckpointConfig(save_checkpoint_steps=4))
    Model(train_cell).train(2, data, callbacks=[LossMonitor(), TimeMonitor(), Record(), checkpoint],
                            dataset_sink_mode=False)
    assert len(losses) == 8 and losses[-1] < losses[0]
    saved = sorted(tmp_path.glob("lin*.ckpt"))
    assert saved
    not_loaded, _ = ms.load_param_into_net(Linear(), ms.load_checkpoint(str(saved[-1])), strict_load=True)
    assert not_loaded == []


def test_build_train_network_with_loss_scale_manager(graph_mode):
    _, net_with_loss, opt = linear_setup()
    manager = ms.amp.DynamicLossScaleManager(init_loss_scale=32.0, scale_factor=2, scale_window=10)
    cell = build_train_network(net_with_loss, opt, {"level": "O0"}, loss_scale_manager=manager)
    _, overflow, scale = cell(*(Tensor(a) for a in batch()))
    assert not overflow and float(scale.asnumpy()) == 32.0
    fixed = ms.amp.FixedLossScaleManager(64.0, drop_overflow_update=True)
    cell = build_train_network(net_with_loss, opt, {"level": "O0"}, loss_scale_manager=fixed)
    assert float(cell(*(Tensor(a) for a in batch()))[2].asnumpy()) == 64.0
    assert isinstance(build_train_network(net_with_loss, opt, "configs/O0.json"), BoostTrainOneStepCell)


@pytest.mark.slow  # over 3 s alone
def test_new_shapes_and_interleaved_eval_still_compile_correctly(graph_mode):
    """The train cells skip the compile_phase walk when the phase is unchanged (a cache hit, so no compile
    follows). Whenever the phase changes, as for a new input shape, the walk must run before the compile, and
    training must match the control throughout, with the sub-network evaluated (compiled on its own) in between."""
    net, net_with_loss, opt = linear_setup("momentum")
    cell = BoostTrainOneStepWithLossScaleCell(net_with_loss, opt, Tensor(4.0), boost_config=O0)
    control, control_with_loss, control_opt = linear_setup("momentum")
    control_cell = nn.TrainOneStepCell(control_with_loss, control_opt)
    phases = set()
    for n in (8, 8, 5, 8, 5):
        x, y = (Tensor(a) for a in batch(n=n, seed=n))
        phase_before = cell.compile_phase
        cell(x, y)
        control_cell(x, y)
        if cell.compile_phase != phase_before:
            assert all(sub.compile_phase == cell.compile_phase for _, sub in cell.cells_and_names())
        phases.add(cell.compile_phase)
        np.testing.assert_array_equal(net(x).asnumpy(), control(x).asnumpy())
    assert len(phases) == 2
    assert_same_weights(net, control)


def test_a_subclass_stays_as_written_and_a_reducer_assigned_later_counts(mode):
    """The cell used to rewrite every subclass's ``__init__`` (a wrapper handing an assigned reducer to the update
    strategy when it returned). Assigning ``grad_reducer`` now does that itself: the subclass's ``__init__`` is its
    own, and a reducer assigned to a built cell, subclassed or not, is what ``construct`` applies."""
    halving = with_halving_reducer(BoostTrainOneStepCell)
    assert not hasattr(halving.__init__, "__wrapped__")
    cells, nets = [], []
    for lr in (0.1, 0.05):
        net, net_with_loss, opt = linear_setup("sgd", lr=lr)
        cells.append(BoostTrainOneStepCell(net_with_loss, opt, boost_config=O0))
        nets.append(net)
    cells[0].grad_reducer = Halve()
    assert cells[0].update.grad_reducer is cells[0].grad_reducer
    for seed in range(3):
        inputs = [Tensor(a) for a in batch(seed=seed)]
        for cell in cells:
            cell(*inputs)
    assert_same_weights(*nets, exact=False)
