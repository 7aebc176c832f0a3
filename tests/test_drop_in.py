"""Drop-in for real configs and calls: what mindspore.boost and mindspore.nn accept runs here, with the meaning it
has there (a warning where it is likely a mistake). The seven cases, trained in both execution modes."""
import copy

import mindspore as ms
import mindspore.boost.boost as reference_boost
import numpy as np
import pytest
from mindspore import Parameter, Tensor, nn, ops
from mindspore.common import dtype as mstype
from mindspore.ops import functional as F

from boost_cells import (AutoBoost, BoostConfig, BoostConfigWarning, BoostTrainOneStepCell,
                         BoostTrainOneStepWithLossScaleCell, GroupLossScaleManager, build_train_network)
from boost_cells.config import FEATURES
from tests.helpers import accumulation, batch, data, freeze_config, linear_setup, mlp_setup, weights_of

O0 = {"level": "O0"}
FLOAT32_MAX = np.finfo(np.float32).max


def batches(count, n=4):
    return [tuple(Tensor(a) for a in batch(n=n, seed=seed)) for seed in range(count)]


def train(cell, data):
    for inputs in data:
        cell(*inputs)


def accumulation_buffers(cell):
    return [p.name for p in cell.get_parameters() if p.name.startswith("grad_accumulation.")]


def reference_switches(level, config_dict, monkeypatch):
    """The six switches mindspore.boost resolves for (level, config_dict), without its singleton and without
    letting its 'manual' mode write into its shared level table."""
    monkeypatch.setattr(reference_boost, "_boost_config_level", copy.deepcopy(reference_boost._boost_config_level))
    resolver = object.__new__(reference_boost.AutoBoost)
    return dict(resolver._get_configuration(level, copy.deepcopy(config_dict)))


def test_common_grad_accumulation_step_accumulates(mode):
    """Case 1: the reference reads the step count from 'common'; 4 micro-steps per update, the same weights as the
    'grad_accumulation' section's form (which tests/test_grad_accumulation.py checks against one big batch)."""
    net, net_with_loss, opt = linear_setup("momentum")
    cell = BoostTrainOneStepCell(net_with_loss, opt, boost_config={
        "boost": {"mode": "manual", "grad_accumulation": True}, "common": {"grad_accumulation_step": 4}})
    control, control_with_loss, control_opt = linear_setup("momentum")
    control_cell = BoostTrainOneStepCell(control_with_loss, control_opt, boost_config=accumulation(4))
    start = weights_of(net)
    data = batches(8)
    train(cell, data[:3])
    assert all(np.array_equal(start[name], value) for name, value in weights_of(net).items())
    train(cell, data[3:])
    train(control_cell, data)
    assert int(cell.update.accumulation_step.asnumpy()) == 0
    for name, value in weights_of(control).items():
        np.testing.assert_array_equal(weights_of(net)[name], value)


def test_switch_beside_auto_mode_is_ignored(mode):
    """Case 2: under 'auto' the listed switch is ignored, with a warning: the cell trains plain O0."""
    with pytest.warns(BoostConfigWarning, match="ignores the switches"):
        config = BoostConfig.from_dict({"boost": {"mode": "auto", "grad_accumulation": True},
                                        "grad_accumulation": {"grad_accumulation_step": 2}})
    net, net_with_loss, opt = linear_setup()
    cell = BoostTrainOneStepCell(net_with_loss, opt, boost_config=config)
    control, control_with_loss, control_opt = linear_setup()
    control_cell = nn.TrainOneStepCell(control_with_loss, control_opt)
    assert accumulation_buffers(cell) == []
    data = batches(2)
    train(cell, data)
    train(control_cell, data)
    for name, value in weights_of(control).items():
        np.testing.assert_allclose(weights_of(net)[name], value, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("how", ["scale_sense", "set_sense_scale"])
def test_float32_max_scale_reports_overflow_and_changes_nothing(mode, how):
    """Case 3: MindSpore's own loss-scale tests force an overflow with Tensor([float32 max]); the step reports it
    and leaves weights and optimizer state (Momentum's moments) as they were."""
    net, net_with_loss, opt = linear_setup("momentum")
    initial = Tensor([FLOAT32_MAX]) if how == "scale_sense" else Tensor([8.0])
    cell = BoostTrainOneStepWithLossScaleCell(net_with_loss, opt, initial, boost_config=O0)
    train(cell, batches(1))  # a clean step first, so the moments are non-zero
    if how == "set_sense_scale":
        cell.set_sense_scale(Tensor([FLOAT32_MAX]))
    weights, moments = weights_of(net), [m.asnumpy().copy() for m in opt.moments]
    if how == "set_sense_scale":
        assert any(m.any() for m in moments)
    loss, overflow, scale = cell(*batches(2)[1])
    assert bool(overflow.asnumpy()) and np.isfinite(loss.asnumpy())
    assert float(scale.asnumpy()[0]) == FLOAT32_MAX
    for name, value in weights_of(net).items():
        np.testing.assert_array_equal(weights[name], value)
    for before, after in zip(moments, opt.moments):
        np.testing.assert_array_equal(before, after.asnumpy())


def test_accumulation_over_one_step_updates_every_call(mode):
    """Case 4: 'grad_accumulation' on with the reference's default step count 1 is one micro-step per update: a
    warning, no buffers, the same weights as plain O0."""
    with pytest.warns(BoostConfigWarning, match="'grad_accumulation_step' 1"):
        config = BoostConfig.from_dict({"boost": {"mode": "manual", "grad_accumulation": True}})
    net, net_with_loss, opt = linear_setup("momentum")
    cell = BoostTrainOneStepCell(net_with_loss, opt, boost_config=config)
    control, control_with_loss, control_opt = linear_setup("momentum")
    control_cell = BoostTrainOneStepCell(control_with_loss, control_opt, boost_config=O0)
    assert accumulation_buffers(cell) == []
    start = weights_of(net)
    data = batches(3)
    for inputs in data:
        before = weights_of(net)
        cell(*inputs)
        assert any(not np.array_equal(before[name], value) for name, value in weights_of(net).items())
        control_cell(*inputs)
    assert any(not np.array_equal(start[name], value) for name, value in weights_of(net).items())
    for name, value in weights_of(control).items():
        np.testing.assert_array_equal(weights_of(net)[name], value)


def test_fixed_manager_without_dropping_scales_and_never_skips(mode):
    """Case 5: the model zoo's ResNet: FixedLossScaleManager(scale, drop_overflow_update=False) with
    Momentum(..., loss_scale=scale). As MindSpore, a plain cell with sens=scale: the same weights as
    nn.TrainOneStepCell(net, opt, sens=scale), an update on every call, and the loss returned."""
    scale = 1024.0
    net, net_with_loss, _ = linear_setup()
    opt = nn.Momentum(net.trainable_params(), 0.1, 0.9, loss_scale=scale)
    manager = ms.amp.FixedLossScaleManager(scale, drop_overflow_update=False)
    cell = build_train_network(net_with_loss, opt, O0, loss_scale_manager=manager)
    assert type(cell) is BoostTrainOneStepCell
    control, control_with_loss, _ = linear_setup()
    control_cell = nn.TrainOneStepCell(control_with_loss,
                                       nn.Momentum(control.trainable_params(), 0.1, 0.9, loss_scale=scale), sens=scale)
    for inputs in batches(3):
        before = weights_of(net)
        loss = cell(*inputs)
        assert loss.shape == () and np.isfinite(loss.asnumpy())
        assert any(not np.array_equal(before[name], value) for name, value in weights_of(net).items())
        control_cell(*inputs)
    for name, value in weights_of(control).items():
        np.testing.assert_array_equal(weights_of(net)[name], value)


def test_fixed_manager_warns_when_the_optimizer_does_not_divide_the_scale_out():
    _, net_with_loss, opt = linear_setup("momentum")
    with pytest.warns(UserWarning, match="optimizer's loss_scale is 1.0, so every update is off by a factor 128"):
        build_train_network(net_with_loss, opt, O0,
                            loss_scale_manager=ms.amp.FixedLossScaleManager(128.0, drop_overflow_update=False))


REFERENCE_CASES = [
    ("O1", {"boost": {"mode": "manual", "grad_freeze": False}}),   # the model zoo's ResNet: LessBN alone
    ("O2", {"boost": {"mode": "manual", "less_bn": False, "grad_freeze": False}}),
    ("O0", {"boost": {"mode": "manual", "adasum": True, "grad_accumulation": True}}),
    ("O0", {"boost": {"mode": "auto", **dict.fromkeys(FEATURES, False)}}),
    ("O2", {"boost": {"mode": "disable_all", "less_bn": True}}),
    ("O0", {"boost": {"mode": "auto"}}),
]


@pytest.mark.parametrize("level, config_dict", REFERENCE_CASES)
def test_switches_resolve_as_the_reference(level, config_dict, monkeypatch):
    """Cases 2 and 6: 'manual' starts from the level; non-manual modes ignore listed switches. Compared with
    mindspore.boost's own resolution of the same (level, dict)."""
    expected = reference_switches(level, config_dict, monkeypatch)
    assert dict(BoostConfig.from_dict(config_dict, level=level).features) == expected


def test_level_less_config_dict_takes_the_argument_level():
    """Case 7, with a dict: the level comes from AutoBoost(level, ...)."""
    boost = AutoBoost("O2", {"boost": {"mode": "manual", "less_bn": False, "grad_freeze": False},
                             "common": {"device_number": 2}})
    assert boost.config.level_name == "O2" and boost.boost_config["adasum"]
    AutoBoost("O0")


# ---------------------------------------------------------------- what a subclass in the reference's style reads

class ReferenceStyleCell(BoostTrainOneStepCell):
    """A subclass whose ``construct`` is the reference's own (``mindspore.boost.BoostTrainOneStepCell.construct``),
    plus what a port reads of the cell's state: after each call, ``position`` counts micro-steps modulo
    ``max_accumulation_step`` beside the cell's ``accumulation_step``, which must agree."""

    def __init__(self, network, optimizer, boost_config):
        super().__init__(network, optimizer, 1.0, boost_config=boost_config)
        self.position = Parameter(Tensor(0, mstype.int32), name="position", requires_grad=False)

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
            elif self.enable_dim_reduce:
                loss = F.depend(loss, self.dim_reduce(loss, grads, sens, self.weights, self.weights_clone, *inputs))
            elif self.enable_adasum:
                loss = F.depend(loss, self.adasum_process(loss, grads))
            else:
                loss = F.depend(loss, self.optimizer(grads))
        position = F.depend((self.position + 1) % self.max_accumulation_step, loss)
        return F.depend(loss, ops.assign(self.position, position)), self.accumulation_step


def pca_file(folder, elements, components=2):
    """An .npy PCA matrix with orthonormal rows over ``elements`` weight elements."""
    rows = np.linalg.qr(np.random.RandomState(3).randn(elements, components))[0].T.astype(np.float32)
    path = folder / "pca.npy"
    np.save(path, rows)
    return str(path)


SUBCLASS_CONFIGS = {
    "O0": lambda tmp_path: O0,
    "accumulation": lambda tmp_path: accumulation(2),
    "freezing": lambda tmp_path: freeze_config(param_groups=3, freeze_type=2, freeze_p=0.5, total_steps=4),
    "dim_reduce": lambda tmp_path: {"boost": {"mode": "manual", "dim_reduce": True},
                                    "dim_reduce": {"pca_mat_path": pca_file(tmp_path, 219), "n_components": 2}},
}


@pytest.mark.parametrize("case", [pytest.param(case, marks=[pytest.mark.slow] if case == "dim_reduce" else [])
                                  for case in sorted(SUBCLASS_CONFIGS)])  # DimReduce's line search: 7 s in PyNative
def test_a_subclass_with_the_reference_construct_trains_as_the_cell(mode, case, tmp_path):
    """The reference's construct reads freeze, use_grad_accumulation, max_accumulation_step, accumulation_step,
    enable_dim_reduce (and dim_reduce, weights_clone with the reference's argument list) and enable_adasum; six of
    them were missing, and DimReduce took (loss, grads, *inputs). Four steps of the subclass equal four steps of the
    cell it subclasses, and its counter agrees with the cell's."""
    config = SUBCLASS_CONFIGS[case](tmp_path)
    net, net_with_loss, opt = mlp_setup()
    subclassed = ReferenceStyleCell(net_with_loss, opt, boost_config=config)
    plain_net, plain_with_loss, plain_opt = mlp_setup()
    plain = BoostTrainOneStepCell(plain_with_loss, plain_opt, 1.0, boost_config=config)
    for step in range(4):
        loss, counter = subclassed(*data(step))
        np.testing.assert_allclose(loss.asnumpy(), plain(*data(step)).asnumpy(), rtol=1e-6)
        cycle = 2 if case == "accumulation" else 1
        assert int(counter.asnumpy()) == int(subclassed.position.asnumpy()) == (step + 1) % cycle
    assert weights_of(net).keys() == weights_of(plain_net).keys()
    for name, value in weights_of(net).items():
        np.testing.assert_allclose(value, weights_of(plain_net)[name], rtol=1e-6, atol=1e-7)
    assert any((value != weights_of(mlp_setup()[0])[name]).any() for name, value in weights_of(net).items())


def test_the_reference_attributes_of_a_train_cell_mean_what_they_mean_there():
    """What the reference's BoostTrainOneStepCell.__init__ sets, read back here: auto_boost holds the cell's config
    without putting it in force; accumulation_step and grad_accumulation are accumulation's counter and buffers;
    freeze_nets, train_strategy and step are the freezing sequence's; sync_tensor is the reference's constant 0."""
    AutoBoost("O0", accumulation(4))
    _, net_with_loss, opt = mlp_setup()
    cell = BoostTrainOneStepCell(net_with_loss, opt, boost_config=freeze_config(freeze_type=2, **accumulation(2)))
    assert cell.auto_boost.config == cell.boost_config and cell.auto_boost.grad_accumulation_step == 2
    assert AutoBoost().grad_accumulation_step == 4  # the config in force is left alone
    assert cell.accumulation_step is cell.update.accumulation_step
    assert tuple(cell.grad_accumulation) == tuple(cell.update.grad_sums) and len(cell.grad_accumulation) == 12
    assert cell.train_strategy is cell.optimizer.train_strategy
    assert cell.step is cell.train_step.schedule.position
    assert len(cell.freeze_nets) == 3 and cell.mean is None and cell.degree is None
    assert int(cell.sync_tensor.asnumpy()) == 0
    x, y = data(0)
    first = cell.weights[0].asnumpy().copy()
    cell.freeze_nets[1](x, y)
    cell.freeze_nets[1](x, y)  # trains from group 1: the first layer stays
    np.testing.assert_array_equal(cell.weights[0].asnumpy(), first)
    assert cell.weights[4].asnumpy().tolist() != mlp_setup()[0].trainable_params()[4].asnumpy().tolist()

    _, net_with_loss, opt = linear_setup()
    plain = BoostTrainOneStepCell(net_with_loss, opt, boost_config=O0)
    assert int(plain.accumulation_step.asnumpy()) == 0 and int(plain.step.asnumpy()) == 0
    assert plain.train_strategy is None and plain.freeze_nets is None
    assert not hasattr(plain, "grad_accumulation") and not hasattr(plain, "dim_reduce")


def test_the_automatic_schedule_refuses_the_sequence_attributes_naming_what_to_read():
    _, net_with_loss, opt = mlp_setup()
    cell = BoostTrainOneStepCell(net_with_loss, opt, boost_config=freeze_config(freeze_type="auto"))
    for name in ("train_strategy", "step"):
        with pytest.raises(ValueError, match=f"'{name}' has no value with the automatic .*current_index"):
            getattr(cell, name)


def test_the_reference_attributes_of_the_loss_scale_cell():
    _, net_with_loss, opt = linear_setup()
    cell = BoostTrainOneStepWithLossScaleCell(net_with_loss, opt, Tensor(8.0, ms.float32))
    assert cell.enable_enhanced_amp is False and cell.gpu_target is False and cell.is_distributed is False
    assert not hasattr(cell, "loss_scale_groups")
    cell._set_sense_scale(Tensor(4.0, ms.float32))  # pylint: disable=protected-access
    assert float(cell.scale_sense.asnumpy()) == 4.0
    net, net_with_loss, opt = linear_setup()
    groups = [[net.trainable_params()[0]], [net.trainable_params()[1]]]
    grouped = BoostTrainOneStepWithLossScaleCell(net_with_loss, opt, GroupLossScaleManager(4.0, groups))
    assert grouped.enable_enhanced_amp is True and grouped.loss_scale_groups == tuple(map(tuple, groups))
