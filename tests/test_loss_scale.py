"""DynamicLossScaleUpdate against a NumPy reference policy; equality with MindSpore's cell when unclamped."""
import numpy as np
import pytest
from mindspore import Parameter, Tensor, nn
from mindspore.common import dtype as mstype

from boost_cells import DynamicLossScaleUpdate
from boost_cells.scaling.loss_scale import policy_from_config, scale_sense_and_policy
from tests.helpers import HUGE, numpy_policy


def run_cell(cell, init, overflows):
    scale = Parameter(Tensor(init, mstype.float32), name="scale_sense")
    out = []
    for overflow in overflows:
        returned = cell(scale, Tensor(overflow))
        assert bool(returned.asnumpy()) == overflow
        out.append(float(scale.asnumpy()))
    return out


OVERFLOWS = [False, False, True, False, False, False, True, True, True, False, False, False, False, False]


@pytest.mark.parametrize("hysteresis", [1, 2, 3])
def test_trajectory_matches_numpy_reference(mode, hysteresis):
    cell = DynamicLossScaleUpdate(64.0, factor=2.0, window=2, min_scale=8.0, max_scale=256.0, hysteresis=hysteresis)
    expected = numpy_policy(64.0, 2.0, 2, 8.0, 256.0, hysteresis, OVERFLOWS)
    assert run_cell(cell, 64.0, OVERFLOWS) == expected


def test_grows_at_end_of_window_th_clean_step(graph_mode):
    """window=3: the 3rd consecutive clean step doubles the scale; an overflow restarts the count."""
    cell = DynamicLossScaleUpdate(4.0, factor=2.0, window=3)
    assert run_cell(cell, 4.0, [False, False, False, False, True, False, False, False]) == \
        [4.0, 4.0, 8.0, 8.0, 4.0, 4.0, 4.0, 8.0]


def test_clamped_at_floor_and_ceiling(graph_mode):
    cell = DynamicLossScaleUpdate(2.0, factor=4.0, window=1, min_scale=1.0, max_scale=16.0)
    assert run_cell(cell, 2.0, [True, True, False, False, False, False]) == [1.0, 1.0, 4.0, 16.0, 16.0, 16.0]


def test_same_as_mindspore_cell_without_clamping(graph_mode):
    flags = OVERFLOWS * 2
    ours = run_cell(DynamicLossScaleUpdate(2.0 ** 10, 2.0, 3, min_scale=1.0, max_scale=2.0 ** 40), 2.0 ** 10, flags)
    theirs = run_cell(nn.DynamicLossScaleUpdateCell(2.0 ** 10, 2.0, 3), 2.0 ** 10, flags)
    assert ours == theirs


def test_state_is_named_parameters():
    names = {p.name for p in DynamicLossScaleUpdate(8.0).get_parameters()}
    assert names == {"loss_scale.clean_steps", "loss_scale.overflows_left"}


@pytest.mark.parametrize("kwargs, fragment", [
    ({"loss_scale_value": 0.5, "min_scale": 1.0}, "min_scale <= loss_scale_value"),
    ({"loss_scale_value": 8.0, "factor": 1.0}, "'factor' must be a finite number > 1, but got 1.0"),
    ({"loss_scale_value": 8.0, "max_scale": 3e38}, "'max_scale' must be a number in \\(0, 2\\*\\*64\\]"),
    ({"loss_scale_value": 8.0, "window": 0}, "'window' must be an int in \\[1, 2147483647\\], but got 0"),
    ({"loss_scale_value": 8.0, "window": 2.0}, r"'window' must be an int in \[1, 2147483647\], but got 2.0"),
    ({"loss_scale_value": 8.0, "hysteresis": 1.5}, r"'hysteresis' must be an int in \[1, 2147483647\], but got 1.5"),
])
def test_bad_arguments(kwargs, fragment):
    with pytest.raises(ValueError, match=fragment):
        DynamicLossScaleUpdate(**kwargs)


def test_scale_sense_forms():
    param, policy = scale_sense_and_policy(Tensor([8.0], mstype.float32))
    assert param.shape == (1,) and isinstance(policy, nn.FixedLossScaleUpdateCell)
    param, policy = scale_sense_and_policy(nn.DynamicLossScaleUpdateCell(32.0, 2, 10))
    assert float(param.asnumpy()) == 32.0
    with pytest.raises(ValueError, match=r"shape \(\) or \(1,\), but got"):
        scale_sense_and_policy(Tensor(np.ones(2, np.float32)))
    with pytest.raises(TypeError, match="got float"):
        scale_sense_and_policy(8.0)
    with pytest.raises(TypeError, match="get_loss_scale"):
        scale_sense_and_policy(nn.ReLU())


def test_policy_from_config():
    section = {"type": "dynamic", "init": 16.0, "factor": 2.0, "window": 5, "min_scale": 2.0, "max_scale": 64.0,
               "hysteresis": 2}
    policy = policy_from_config(section)
    assert (policy.window, policy.min_scale, policy.max_scale, policy.hysteresis) == (5, 2.0, 64.0, 2)
    assert isinstance(policy_from_config({**section, "type": "static"}), nn.FixedLossScaleUpdateCell)


@pytest.mark.parametrize("kwargs, message", [
    ({"loss_scale_value": "1024"}, "'loss_scale_value' must be"),   # was TypeError from '<='
    ({"loss_scale_value": 1024.0, "max_scale": None}, "'max_scale' must be"),
    ({"loss_scale_value": 1024.0, "factor": HUGE}, "'factor' must be"),   # was OverflowError in float()
    ({"loss_scale_value": 1024.0, "factor": float("nan")}, "'factor' must be"),   # was accepted: a nan scale
    ({"loss_scale_value": 1024.0, "factor": "2"}, "'factor' must be"),
    ({"loss_scale_value": 1024.0, "window": float("inf")}, "'window' must be"),   # was OverflowError
    ({"loss_scale_value": 1024.0, "window": "O1"}, "'window' must be"),   # was int() ValueError
    ({"loss_scale_value": 1024.0, "hysteresis": 10 ** 30}, "'hysteresis' must be"),   # OverflowError np.full
    ({"loss_scale_value": 1024.0, "window": 10 ** 30}, "'window' must be"),   # failed at graph build
])
def test_dynamic_loss_scale_arguments_raise_value_error_naming_them(kwargs, message):
    """Regression, found by tests/test_constructor_properties.py (builds or raises naming the argument): a bad
    argument raised TypeError, OverflowError or int()'s ValueError, failed only when the graph was built, or (a nan
    factor) was accepted; each is a ValueError naming the argument now."""
    with pytest.raises(ValueError, match=message):
        DynamicLossScaleUpdate(**kwargs)
