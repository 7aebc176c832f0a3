"""Drop-in for real configs and calls: what mindspore.boost and mindspore.nn accept runs here, with the meaning it
has there (a warning where it is likely a mistake). Issue 7's seven cases, trained in both execution modes."""
import copy

import mindspore as ms
import mindspore.boost.boost as reference_boost
import numpy as np
import pytest
from mindspore import Tensor, nn

from boost_cells import (AutoBoost, BoostConfig, BoostConfigWarning, BoostTrainOneStepCell,
                         BoostTrainOneStepWithLossScaleCell, build_train_network)
from boost_cells.config import FEATURES
from tests.helpers import accumulation, batch, linear_setup, weights_of

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
