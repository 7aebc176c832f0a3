"""Constructor arguments of the public classes, generated (Hypothesis) from the same values as the config
properties. Two properties per argument: each value either builds the object or raises TypeError/ValueError naming
the argument, never another exception; and a constructor accepts exactly the values the config accepts for the
same setting.

Each case maps one argument to its config key (``DynamicLossScaleUpdate(window=...)`` and ``loss_scale.window``,
``GradientFreeze(freeze_p=...)`` and ``grad_freeze.freeze_p``, ...), the other arguments left at their defaults on
both sides. Every case first tries a fixed list of edge values (integral floats and bools for ints, strings for
numbers, infinities, NaN, huge and tiny numbers), then generated ones.

The constructors and the config check each argument by the same rule (``boost_cells.rules``); the cases that
disagreed before (``window=2.0``, ``alpha=inf``, ``inc=100``, ``min_scale=1e-30``, bools for scales ...) agree now.
``AdaSum(device_number=...)`` is not here: it needs a data-parallel job (tests/test_distributed.py refuses a bad
rank count there).
"""
import math
import re
from dataclasses import dataclass, field

import numpy as np
import pytest
from hypothesis import given, settings

from boost_cells import (AutoBoost, BoostConfig, BoostMonitor, DimReduce, DynamicLossScaleUpdate, GradientAccumulation,
                         GradientFreeze, GroupLossScaleManager, LessBN, Log2LossScaleUpdate)
from tests import figures
from tests.conftest import examples, json_values
from tests.helpers import Linear, linear_setup

pytestmark = pytest.mark.slow  # Hypothesis properties: generated arguments, a cell built for each

EDGES = [True, False, 0, 1, 2, 3, -1, 2.0, 2.5, 0.5, 1e-30, 1e-45, 64.0, 100.0, 2.0 ** 64, 2.0 ** 70, 10 ** 30,
         10 ** 400, math.inf, -math.inf, math.nan, "2", "O1", None, [2], {"x": 2}]


@dataclass
class Case:
    """``build(value)`` sets argument ``arg`` of ``owner``; the config equivalent is ``config_key`` in a document
    with ``context`` (the other keys that make the setting mean the same, e.g. the policy type)."""
    owner: str
    arg: str
    build: object
    config_key: tuple
    context: dict = field(default_factory=dict)
    related: tuple = ()
    skip: object = None

    def id(self):
        return f"{self.owner}.{self.arg}"


def _linear_parts():
    net, net_with_loss, opt = linear_setup()
    return net, net_with_loss, opt


def _dim_reduce(**kwargs):
    net, net_with_loss, opt = _linear_parts()
    args = dict(rho=0.55, gamma=0.9, alpha=0.001, sigma=0.4)
    args.update(kwargs)
    return DimReduce(net_with_loss, opt, opt.parameters, np.zeros((2, 15), np.float32), 2, args["rho"],
                     args["gamma"], args["alpha"], args["sigma"], 0, 1)


def _auto_boost(level):
    """AutoBoost(level, {}); a successful one becomes the latest config, which cells built later without
    boost_config would take, so the default (O0) is put back."""
    boost = AutoBoost(level, {})
    AutoBoost("O0")
    return boost


DYNAMIC = {"type": "dynamic"}
LOG2 = {"type": "log2"}
CASES = [
    Case("DynamicLossScaleUpdate", "loss_scale_value", lambda v: DynamicLossScaleUpdate(v), ("loss_scale", "init"),
         DYNAMIC),
    Case("DynamicLossScaleUpdate", "factor", lambda v: DynamicLossScaleUpdate(1024.0, factor=v),
         ("loss_scale", "factor"), DYNAMIC),
    Case("DynamicLossScaleUpdate", "window", lambda v: DynamicLossScaleUpdate(1024.0, window=v),
         ("loss_scale", "window"), DYNAMIC),
    Case("DynamicLossScaleUpdate", "hysteresis", lambda v: DynamicLossScaleUpdate(1024.0, hysteresis=v),
         ("loss_scale", "hysteresis"), DYNAMIC),
    Case("DynamicLossScaleUpdate", "min_scale", lambda v: DynamicLossScaleUpdate(1024.0, min_scale=v),
         ("loss_scale", "min_scale"), {**DYNAMIC, "init": 1024.0}, related=("loss_scale_value",)),
    Case("DynamicLossScaleUpdate", "max_scale", lambda v: DynamicLossScaleUpdate(1024.0, max_scale=v),
         ("loss_scale", "max_scale"), {**DYNAMIC, "init": 1024.0}, related=("loss_scale_value",)),
    Case("Log2LossScaleUpdate", "loss_scale_value", lambda v: Log2LossScaleUpdate(v), ("loss_scale", "init"), LOG2),
    Case("Log2LossScaleUpdate", "inc", lambda v: Log2LossScaleUpdate(1024.0, inc=v), ("loss_scale", "inc"), LOG2),
    Case("Log2LossScaleUpdate", "dec", lambda v: Log2LossScaleUpdate(1024.0, dec=v), ("loss_scale", "dec"), LOG2),
    # a list gives one initial scale per group, the manager's own API (the config has one number)
    Case("GroupLossScaleManager", "init_loss_scale", lambda v: GroupLossScaleManager(v, []), ("loss_scale", "init"),
         DYNAMIC, skip=lambda v: isinstance(v, list)),
    Case("GroupLossScaleManager", "scale_factor", lambda v: GroupLossScaleManager(1024.0, [], scale_factor=v),
         ("loss_scale", "factor"), DYNAMIC),
    Case("GroupLossScaleManager", "scale_window", lambda v: GroupLossScaleManager(1024.0, [], scale_window=v),
         ("loss_scale", "window"), DYNAMIC),
    Case("GroupLossScaleManager", "min_scale", lambda v: GroupLossScaleManager(1024.0, [], min_scale=v),
         ("loss_scale", "min_scale"), {**DYNAMIC, "init": 1024.0}, related=("init_loss_scale",)),
    Case("GroupLossScaleManager", "max_scale", lambda v: GroupLossScaleManager(1024.0, [], max_scale=v),
         ("loss_scale", "max_scale"), {**DYNAMIC, "init": 1024.0}, related=("init_loss_scale", "min_scale")),
    Case("GradientFreeze", "param_groups", lambda v: GradientFreeze(v, 1, 0.7, 100), ("grad_freeze", "param_groups")),
    Case("GradientFreeze", "freeze_type", lambda v: GradientFreeze(10, v, 0.7, 100), ("grad_freeze", "freeze_type")),
    Case("GradientFreeze", "freeze_p", lambda v: GradientFreeze(10, 1, v, 100), ("grad_freeze", "freeze_p")),
    Case("GradientFreeze", "total_steps", lambda v: GradientFreeze(10, 1, 0.7, v), ("grad_freeze", "total_steps")),
    Case("GradientFreeze", "seed", lambda v: GradientFreeze(10, 1, 0.7, 100, v), ("grad_freeze", "seed")),
    Case("GradientAccumulation", "max_accumulation_step", lambda v: GradientAccumulation(v, _linear_parts()[2]),
         ("grad_accumulation", "grad_accumulation_step")),
    Case("DimReduce", "rho", lambda v: _dim_reduce(rho=v), ("dim_reduce", "rho")),
    Case("DimReduce", "gamma", lambda v: _dim_reduce(gamma=v), ("dim_reduce", "gamma")),
    Case("DimReduce", "sigma", lambda v: _dim_reduce(sigma=v), ("dim_reduce", "sigma")),
    Case("DimReduce", "alpha", lambda v: _dim_reduce(alpha=v), ("dim_reduce", "alpha")),
    Case("LessBN", "fn_flag", lambda v: LessBN(Linear(), fn_flag=v), ("less_bn", "fn_flag")),
    # None is "no level argument" (the config's own level, or O0), not a level
    Case("AutoBoost", "level", lambda v: _auto_boost(v), ("level",), skip=lambda v: v is None),
]


def config_accepts(case, value):
    if case.config_key == ("level",):
        doc = {"level": value}
    else:
        section, key = case.config_key
        doc = {section: {**case.context, key: value}}
    try:
        BoostConfig.from_dict(doc)
    except ValueError:
        return False
    return True


def outcome(case, value):
    """``(accepted, problem)``: the constructor builds (accepted) or raises TypeError/ValueError naming the argument
    (or one it is checked against); anything else is the problem."""
    figures.add("constructor argument values tried")
    try:
        case.build(value)
    except (TypeError, ValueError) as error:
        if not re.search(rf"\b({'|'.join((case.arg, *case.related))})\b", str(error)):
            return False, f"{case.id()}={value!r}: {type(error).__name__} {str(error)!r} does not name the argument"
        return False, None
    except Exception as error:  # pylint: disable=broad-except
        return None, f"{case.id()}={value!r}: {type(error).__name__}: {error}"
    return True, None


def disagreement(case, value):
    accepted, _ = outcome(case, value)
    if accepted is not None and accepted != config_accepts(case, value):
        return f"{case.id()}={value!r}: the constructor {'accepts' if accepted else 'refuses'} it, the config does not"
    return None


def values(case):
    """The edge values, then generated ones (Hypothesis), for ``case``; ``check(value)`` returns a problem or None."""
    def run(check):
        problems = [p for p in (check(v) for v in EDGES if case.skip is None or not case.skip(v)) if p]
        assert not problems, "\n".join(problems)

        @settings(max_examples=examples(10))
        @given(value=json_values)
        def generated(value):
            if case.skip is None or not case.skip(value):
                found = check(value)
                assert found is None, found
        generated()
    return run


@pytest.mark.parametrize("case", [pytest.param(case, id=case.id()) for case in CASES])
def test_constructor_argument_builds_or_raises_naming_it(graph_mode, case):
    values(case)(lambda value: outcome(case, value)[1])


@pytest.mark.parametrize("case", [pytest.param(case, id=case.id()) for case in CASES])
def test_constructor_argument_follows_the_config_rule(graph_mode, case):
    values(case)(lambda value: disagreement(case, value))


@settings(max_examples=examples(25))
@given(interval=json_values, resume_step=json_values)
def test_boost_monitor_arguments_build_or_raise_value_error_naming_them(interval, resume_step):
    """BoostMonitor has no config key: ints >= 1 (interval) and None or ints >= 0 (resume_step), bools refused."""
    try:
        BoostMonitor(interval, print_fn=None, resume_step=resume_step)
    except ValueError as error:
        bad_interval = isinstance(interval, bool) or not isinstance(interval, int) or interval < 1
        assert ("'interval'" in str(error)) == bad_interval or "'resume_step'" in str(error)
        return
    assert isinstance(interval, int) and not isinstance(interval, bool) and interval >= 1
    assert resume_step is None or (isinstance(resume_step, int) and not isinstance(resume_step, bool)
                                   and resume_step >= 0)
