"""The log2 loss-scale policy: trajectory against NumPy with planted overflows, in a train cell, and its config."""
import math

import mindspore as ms
import numpy as np
import pytest
from mindspore import Parameter, Tensor, nn

from boost_cells import BoostConfig, Log2LossScaleUpdate, build_train_network
from tests.helpers import HUGE, batch, linear_setup, weights_of


def numpy_log2_trajectory(init, inc, dec, min_scale, max_scale, overflows):
    """[(log2, scale)] after each step, in float32 as the policy computes it: +inc clean, -dec overflow, clamped."""
    log2, out = np.float32(math.log2(init)), []
    low, high = np.float32(math.log2(min_scale)), np.float32(math.log2(max_scale))
    for overflow in overflows:
        log2 = np.clip(np.float32(log2 + np.float32(-dec if overflow else inc)), low, high)
        out.append((log2, np.exp2(log2)))
    return out


class PolicyDriver(nn.Cell):
    """Holds a scale Parameter and a policy; each call feeds one overflow flag and returns the scale."""

    def __init__(self, policy, shape=()):
        super().__init__()
        self.policy = policy
        self.scale = Parameter(Tensor(np.full(shape, policy.get_loss_scale(), np.float32)), name="scale")

    def construct(self, overflow):
        return ms.ops.depend(self.scale, self.policy(self.scale, overflow))


# Long clean runs, an overflow burst that hits the floor, growth that hits the ceiling.
PLANTED = [False] * 5 + [True] + [False] * 3 + [True, True, True, True] + [False] * 12 + [True]


@pytest.mark.parametrize("shape", [(), (1,)])
def test_trajectory_matches_numpy_with_planted_overflows(mode, shape):
    init, inc, dec, low, high = 8.0, 0.25, 1.0, 2.0, 16.0
    driver = PolicyDriver(Log2LossScaleUpdate(init, inc, dec, low, high), shape)
    expected = numpy_log2_trajectory(init, inc, dec, low, high, PLANTED)
    for overflow, (log2, scale) in zip(PLANTED, expected):
        got = driver(Tensor(overflow))
        assert got.shape == shape
        assert driver.policy.log2.asnumpy() == log2
        np.testing.assert_allclose(got.asnumpy().reshape(()), scale, rtol=1e-6)
    logs = [log2 for log2, _ in expected]
    assert min(logs) == 1.0 and max(logs) == 4.0  # the planted run reached both clamps


def test_tflib_defaults_double_the_scale_every_2000_clean_steps(graph_mode):
    driver = PolicyDriver(Log2LossScaleUpdate(2.0 ** 10))
    assert driver.policy.inc == 0.0005 and driver.policy.dec == 1.0
    overflows = [False] * 40 + [True] + [False] * 9
    expected = numpy_log2_trajectory(2.0 ** 10, 0.0005, 1.0, 1.0, 2.0 ** 24, overflows)
    for overflow, (log2, scale) in zip(overflows, expected):
        got = float(driver(Tensor(overflow)).asnumpy())
        np.testing.assert_allclose(got, scale, rtol=1e-6)
    # float32 rounds each +0.0005 at log2 ~ 10 (ulp 1e-6), as tflib's float32 variable does: ~1e-5 off after 49.
    assert abs(float(driver.policy.log2.asnumpy()) - (10 + 49 * 0.0005 - 1.0)) < 5e-5


def test_continues_from_a_scale_set_from_outside(graph_mode):
    driver = PolicyDriver(Log2LossScaleUpdate(8.0, inc=0.5, max_scale=2.0 ** 20))
    driver(Tensor(False))
    driver.scale.set_data(Tensor(np.float32(1024.0)))
    np.testing.assert_allclose(float(driver(Tensor(False)).asnumpy()), 2.0 ** 10.5, rtol=1e-6)
    assert float(driver.policy.log2.asnumpy()) == 10.5


def test_train_cell_skips_planted_overflows_and_follows_the_trajectory(mode):
    section = {"type": "log2", "init": 64.0, "inc": 0.5, "dec": 2.0, "min_scale": 4.0, "max_scale": 256.0}
    net, net_with_loss, opt = linear_setup()
    cell = build_train_network(net_with_loss, opt, {"loss_scale": section})
    assert isinstance(cell.loss_scale.policy, Log2LossScaleUpdate)
    x, y = batch()
    bad = x.copy()
    bad[0, 0] = np.inf
    planted = [False, False, True, False, True, True, False, False]
    expected = numpy_log2_trajectory(64.0, 0.5, 2.0, 4.0, 256.0, planted)
    for overflow, (_, scale) in zip(planted, expected):
        before = weights_of(net)
        _, flag, got = cell(Tensor(bad if overflow else x), Tensor(y))
        assert bool(flag.asnumpy()) == overflow
        np.testing.assert_allclose(float(got.asnumpy()), scale, rtol=1e-6)
        after = weights_of(net)
        for name, value in before.items():
            assert np.array_equal(value, after[name]) == overflow, name


def test_config_round_trip_and_defaults():
    config = BoostConfig.from_dict({"loss_scale": {"type": "log2", "init": 1024.0}})
    assert config.loss_scale["inc"] == 0.0005 and config.loss_scale["dec"] == 1.0
    assert BoostConfig.from_dict(config.to_dict()) == config


@pytest.mark.parametrize("section, message", [
    ({"type": "log2", "inc": 0.0}, "'loss_scale.inc' must be a number in \\(0, 64\\]"),
    ({"type": "log2", "dec": -1.0}, "'loss_scale.dec' must be a number in \\(0, 64\\]"),
    ({"type": "log2", "inc": float("nan")}, "'loss_scale.inc' must be"),
    ({"type": "log2", "init": 8.0, "max_scale": 4.0}, "'loss_scale.init' must be in \\[min_scale"),
    ({"type": "log2", "window": 100}, "'loss_scale.window' must be left at its default 2000 unless "
                                      "'loss_scale.type' is 'dynamic'"),
    ({"type": "dynamic", "inc": 0.01}, "'loss_scale.inc' must be left at its default 0.0005 unless "
                                       "'loss_scale.type' is 'log2'"),
    ({"type": "static", "dec": 2.0}, "'loss_scale.dec' must be left at its default"),
])
def test_config_rejects_bad_log2_sections(section, message):
    with pytest.raises(ValueError, match=message):
        BoostConfig.from_dict({"loss_scale": section})


@pytest.mark.parametrize("kwargs, message", [
    ({"loss_scale_value": 8.0, "min_scale": 16.0}, "need 0 < min_scale <= loss_scale_value"),
    ({"loss_scale_value": 8.0, "inc": 0}, "'inc' must be a number in \\(0, 64\\]"),
    ({"loss_scale_value": 8.0, "dec": True}, "'dec' must be a number in \\(0, 64\\]"),
])
def test_policy_rejects_bad_arguments(kwargs, message):
    with pytest.raises(ValueError, match=message):
        Log2LossScaleUpdate(**kwargs)


@pytest.mark.parametrize("kwargs, message", [
    ({"inc": HUGE}, "'inc' must be"),   # was OverflowError in float()
    ({"dec": HUGE}, "'dec' must be"),
    ({"min_scale": "1"}, "'min_scale' must be"),   # was TypeError from '<'
])
def test_log2_loss_scale_arguments_raise_value_error_naming_them(kwargs, message):
    """Regression, found by tests/test_constructor_properties.py: an int too large for a float raised OverflowError
    and a string scale TypeError; each is a ValueError naming the argument now."""
    with pytest.raises(ValueError, match=message):
        Log2LossScaleUpdate(1024.0, **kwargs)
