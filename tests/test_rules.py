"""One rule per argument name: the config key and the constructor argument of the same meaning refuse the same
values with the same words (boost_cells.rules)."""
import math

import numpy as np
import pytest
from mindspore import Parameter, Tensor, nn

from boost_cells import (BoostConfig, DimReduce, DynamicLossScaleUpdate, GradientAccumulation, GradientFreeze,
                         GroupLossScaleManager, LessBN, Log2LossScaleUpdate)
from boost_cells import rules
from boost_cells.config import SCHEMA
from tests.helpers import linear_setup

INF, NAN = float("inf"), float("nan")


def dim_reduce(**kwargs):
    _, net_with_loss, opt = linear_setup("momentum")
    args = {"n_components": 2, "rho": 0.55, "gamma": 0.9, "alpha": 0.001, "sigma": 0.4, **kwargs}
    return DimReduce(net_with_loss, opt, opt.parameters, np.zeros((2, 15)), args["n_components"], args["rho"],
                     args["gamma"], args["alpha"], args["sigma"], 0, 1)


def less_bn(fn_flag):
    net, _, _ = linear_setup()
    return LessBN(net, fn_flag=fn_flag)


# (config key path, constructor argument, the constructor called with the bad value, bad value)
SAME_RULE = [
    # Two disagreements the constructors and the config once had: window=2.0 was accepted by DynamicLossScaleUpdate
    # and refused by GroupLossScaleManager and the config; alpha=inf was accepted by DimReduce, refused by the config.
    ("loss_scale.window", "window", lambda v: DynamicLossScaleUpdate(8.0, window=v), 2.0),
    ("loss_scale.window", "scale_window", lambda v: GroupLossScaleManager(64.0, [], scale_window=v), 2.0),
    ("dim_reduce.alpha", "alpha", lambda v: dim_reduce(alpha=v), INF),
    ("loss_scale.window", "window", lambda v: DynamicLossScaleUpdate(8.0, window=v), 0),
    ("loss_scale.window", "window", lambda v: DynamicLossScaleUpdate(8.0, window=v), True),
    ("loss_scale.hysteresis", "hysteresis", lambda v: DynamicLossScaleUpdate(8.0, hysteresis=v), 1.5),
    ("loss_scale.factor", "factor", lambda v: DynamicLossScaleUpdate(8.0, factor=v), 1.0),
    ("loss_scale.factor", "factor", lambda v: DynamicLossScaleUpdate(8.0, factor=v), NAN),
    ("loss_scale.factor", "scale_factor", lambda v: GroupLossScaleManager(64.0, [], scale_factor=v), INF),
    ("loss_scale.init", "loss_scale_value", lambda v: DynamicLossScaleUpdate(v), NAN),
    ("loss_scale.init", "init_loss_scale", lambda v: GroupLossScaleManager(v, []), 0.0),
    ("loss_scale.init", "loss_scale_value", lambda v: Log2LossScaleUpdate(v), "64"),
    ("loss_scale.min_scale", "min_scale", lambda v: DynamicLossScaleUpdate(8.0, min_scale=v), 0.0),
    ("loss_scale.max_scale", "max_scale", lambda v: Log2LossScaleUpdate(8.0, max_scale=v), 2.0 ** 65),
    ("loss_scale.max_scale", "max_scale", lambda v: GroupLossScaleManager(64.0, [], max_scale=v), INF),
    ("loss_scale.inc", "inc", lambda v: Log2LossScaleUpdate(8.0, inc=v), 65.0),
    ("loss_scale.dec", "dec", lambda v: Log2LossScaleUpdate(8.0, dec=v), True),
    ("dim_reduce.rho", "rho", lambda v: dim_reduce(rho=v), 1.0),
    ("dim_reduce.gamma", "gamma", lambda v: dim_reduce(gamma=v), 0),
    ("dim_reduce.sigma", "sigma", lambda v: dim_reduce(sigma=v), NAN),
    ("dim_reduce.alpha", "alpha", lambda v: dim_reduce(alpha=v), True),
    ("dim_reduce.n_components", "n_components", lambda v: dim_reduce(n_components=v), 0),
    ("less_bn.fn_flag", "fn_flag", less_bn, 1),
    ("grad_accumulation.grad_accumulation_step", "max_accumulation_step",
     lambda v: GradientAccumulation(v, nn.SGD([Parameter(Tensor(np.ones(2, np.float32)), name="w")])), 2.0),
    ("grad_freeze.param_groups", "param_groups", lambda v: GradientFreeze(v, 0, 0.5, 10), 0),
    ("grad_freeze.freeze_type", "freeze_type", lambda v: GradientFreeze(3, v, 0.5, 10), 4),
    ("grad_freeze.freeze_type", "freeze_type", lambda v: GradientFreeze(3, v, 0.5, 10), True),
    ("grad_freeze.freeze_p", "freeze_p", lambda v: GradientFreeze(3, 0, v, 10), 1.5),
    ("grad_freeze.total_steps", "total_steps", lambda v: GradientFreeze(3, 0, 0.5, v), 0),
    ("grad_freeze.seed", "seed", lambda v: GradientFreeze(3, 0, 0.5, 10, seed=v), -1),
    ("grad_freeze.auto_threshold", "auto_threshold", lambda v: GradientFreeze(3, 3, 0.5, 10, auto_threshold=v), 0),
    ("grad_freeze.auto_head_ratio", "auto_head_ratio", lambda v: GradientFreeze(3, 3, 0.5, 10, auto_head_ratio=v),
     1.5),
    ("grad_freeze.auto_interval_share", "auto_interval_share",
     lambda v: GradientFreeze(3, 3, 0.5, 10, auto_interval_share=v), 0),
    ("grad_freeze.auto_warmup_share", "auto_warmup_share",
     lambda v: GradientFreeze(3, 3, 0.5, 10, auto_warmup_share=v), 1.0),
    # AdaSumUpdate's device_number is checked by the same rule, but only data-parallel (tests/test_distributed.py).
]


def nested(path, value):
    section, key = path.split(".")
    return {section: {key: value}}


@pytest.mark.parametrize("path, argument, build, bad", SAME_RULE,
                         ids=[f"{row[1]}={row[3]!r}" for row in SAME_RULE])
def test_config_key_and_constructor_argument_refuse_the_same_value(path, argument, build, bad):
    words = rules.allowed(argument)
    assert words == rules.allowed(path)
    with pytest.raises(ValueError) as from_config:
        BoostConfig.from_dict(nested(path, bad))
    with pytest.raises(ValueError) as from_constructor:
        build(bad)
    assert str(from_config.value) == f"For 'BoostConfig', '{path}' must be {words}, but got {bad!r}."
    assert f"'{argument}' must be {words}, but got {bad!r}." in str(from_constructor.value)
    assert type(from_config.value) is type(from_constructor.value)


def test_wrong_types_are_type_errors_and_value_errors():
    """A wrong type raises RuleTypeError: a TypeError, and a ValueError as the checks it replaced raised."""
    with pytest.raises(TypeError, match=r"'window' must be an int in \[1, 2147483647\], but got 2.0"):
        rules.check("Who", "window", 2.0)
    with pytest.raises(rules.RuleTypeError):
        rules.check("Who", "seed", True)
    with pytest.raises(ValueError) as out_of_range:
        rules.check("Who", "seed", -1)
    assert not isinstance(out_of_range.value, TypeError)


@pytest.mark.parametrize("name, good, bad", [
    ("window", [1, np.int64(3), 2000], [0, True, 2.0, np.float64(3.0), "3", None]),
    ("freeze_type", [0, 1, 2, 3, "auto", np.int32(2)], [4, "Auto", True, False, 1.0]),
    ("freeze_p", [0, 0.5, 1, np.float32(0.25)], [-0.1, 1.5, NAN, True]),
    ("seed", [0, 7], [-1, False, 1.0]),
    ("timeout", [0, 1800], [-1, 1.5]),
    ("alpha", [1e-3, 2], [0, -1.0, INF, NAN]),
    ("init", [1.0, 2.0 ** 64], [0.0, 2.0 ** 64 * 2, INF, NAN, -1.0]),
    ("inc", [0.0005, 64], [0, 64.5, INF]),
    ("mode", ["auto", "manual"], ["fast", 1, None]),
    ("level", ["O0", "O2"], ["O3", [], None]),
    ("gradient_split_groups", [[50, 100], []], [[100, 50], [50, 50], [0], [1.0], (50, 100)]),
    ("pca_mat_path", [None, "a.npy"], [1, b"a.npy"]),
    ("fn_flag", [True, False], [1, 0, "true", None]),
])
def test_each_rule(name, good, bad):
    for value in good:
        assert rules.complies(name, value), value
        assert rules.check("Who", name, value) is value
    for value in bad:
        assert not rules.complies(name, value), value
        with pytest.raises(ValueError, match=f"For 'Who', '{name}' must be "):
            rules.check("Who", name, value)


def test_aliases_share_their_rule():
    for alias, name in (("scale_window", "window"), ("scale_factor", "factor"), ("loss_scale_value", "init"),
                        ("init_loss_scale", "init"), ("max_accumulation_step", "grad_accumulation_step"),
                        ("freeze_para_groups_number", "param_groups")):
        assert rules.rule_of(alias) is rules.RULES[name]
    assert rules.rule_of("loss_scale.window") is rules.RULES["window"]
    with pytest.raises(KeyError):
        rules.rule_of("no_such_argument")


def test_every_config_key_has_a_rule_its_default_meets():
    for section, fields in SCHEMA.items():
        for key, field in fields.items():
            assert rules.complies(key, field.default, rule=field.rule), f"{section}.{key}"


def test_scale_bounds_are_ordered():
    rules.check_scale_bounds("Who", 1.0, 8.0, 16.0)
    with pytest.raises(ValueError, match=r"'min_scale', 'loss_scale_value' and 'max_scale' must be in order: need "
                                         r"0 < min_scale <= loss_scale_value <= max_scale <= 2\*\*64, but got 16.0"):
        rules.check_scale_bounds("Who", 16.0, 8.0, 32.0)
    with pytest.raises(ValueError, match="'max_scale' must be a number in"):
        rules.check_scale_bounds("Who", 1.0, 8.0, math.inf)
