"""Argument rules: one rule per argument name, shared by the config schema and every constructor.

A rule is a type test, a range test and the allowed values in words. ``check(who, name, value)`` applies the rule
of ``name`` (or of the rule it names) and raises with the house message shape

    For 'Who', 'name' must be <allowed>, but got <value>.

so ``BoostConfig`` (``who`` = "BoostConfig", ``name`` = the key path, e.g. "loss_scale.window") and the constructors
(``who`` = the class, ``name`` = the argument) refuse the same values with the same words. Conventions for every
rule: a bool is never an int or a number (``True`` is not a window of 1); NaN and inf are refused wherever a finite
number is meant; NumPy integers and floats count as ints and numbers.

A value of the wrong type raises ``RuleTypeError``, which is a ``TypeError`` and, for code written against the
checks this module replaces (they raised ``ValueError`` for ``window=2.5`` or ``dec=True``), also a ``ValueError``.
A value of the right type out of range raises ``ValueError``.

Argument names with the same meaning share one rule: ``scale_window`` is ``window``, ``scale_factor`` is ``factor``,
``loss_scale_value``/``init_loss_scale`` are ``init``, ``max_accumulation_step`` is ``grad_accumulation_step``.
Rules that tie several arguments together (``min_scale <= init <= max_scale``) are functions below the table.

This module is the config layer's bottom: it imports nothing from boost_cells, and nothing from MindSpore.
"""
import math
import numbers
from types import MappingProxyType

__all__ = ["MAX_LOSS_SCALE", "RULES", "Rule", "RuleTypeError", "allowed", "check", "check_scale_bounds", "complies",
           "is_int", "is_number", "rule_of"]

# Largest loss scale: 1/scale must stay a normal float32 (beyond ~1e38 it flushes to zero and every gradient
# becomes 0), and scale * factor must stay finite.
MAX_LOSS_SCALE = 2.0 ** 64

# Step counts are counted by int32 Parameters (clean steps, overflows left, micro-steps): larger ones can never be
# reached and do not fit the graph's constants. The interval freezing schedule's seed seeds a NumPy RandomState.
INT32_MAX = 2 ** 31 - 1
SEED_MAX = 2 ** 32 - 1


class RuleTypeError(TypeError, ValueError):
    """An argument of the wrong type (a ``TypeError``; also a ``ValueError``, as the checks it replaces raised)."""


def is_int(value):
    """An int or NumPy integer, not a bool."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool) and type(value).__name__ != "bool_"


def is_number(value):
    """An int or float (NumPy's included), not a bool; finiteness is the rule's business."""
    return isinstance(value, numbers.Real) and not isinstance(value, bool) and type(value).__name__ != "bool_"


class Rule:
    """One argument's rule.

    Args:
        allowed (str): the allowed values in words, as they follow "must be" ("an int >= 1").
        accepts (callable): value -> bool, the type test (failing it raises ``RuleTypeError``).
        fits (callable): value -> bool, the range test, called only on accepted values (failing it raises
            ``ValueError``). Default: every accepted value fits.
    """

    def __init__(self, allowed, accepts, fits=None):
        self.allowed = allowed
        self.accepts = accepts
        self.fits = fits if fits is not None else (lambda value: True)

    def complies(self, value):
        return self.accepts(value) and bool(self.fits(value))

    def __repr__(self):
        return f"Rule({self.allowed!r})"


def _int(low, high=None):
    words = f"an int >= {low}" if high is None else f"an int in [{low}, {high}]"
    return Rule(words, is_int, lambda v: v >= low and (high is None or v <= high))


def _finite(value):
    """Whether a number is finite; an int too large for a float (JSON allows 1 followed by 400 zeros) is not."""
    try:
        return math.isfinite(value)
    except OverflowError:
        return False


def _number(words, fits):
    """A finite number (int or float) that ``fits``."""
    return Rule(words, is_number, lambda v: _finite(v) and fits(v))


def _bool():
    return Rule("a bool (true/false)", lambda v: isinstance(v, bool))


def _choice(*choices, words=None):
    """One of ``choices`` (compared by type too: ``True`` is not ``1``)."""
    words = words or "one of " + ", ".join(repr(c) for c in choices)
    kinds = {type(c) for c in choices}
    return Rule(words, lambda v: type(v) in kinds or (int in kinds and is_int(v)), lambda v: v in choices)


def _optional_path():
    return Rule("a path string or null", lambda v: v is None or isinstance(v, str))


def _split_groups():
    return Rule("a strictly increasing list of ints > 0",
                lambda v: isinstance(v, list) and all(is_int(i) for i in v),
                lambda v: all(i > 0 for i in v) and all(a < b for a, b in zip(v, v[1:])))


_UNIT_OPEN = "a number in (0, 1)"

# One rule per argument name. Keep the words short: they follow "'<name>' must be".
RULES = MappingProxyType({
    # the config's own keys
    "level": _choice("O0", "O1", "O2"),
    "mode": _choice("auto", "manual", "enable_all", "disable_all"),
    "loss_scale_type": _choice("dynamic", "static", "log2"),
    "feature_switch": _bool(),
    "gradient_split_groups": _split_groups(),
    "pca_mat_path": _optional_path(),
    "weight_load_dir": _optional_path(),
    "overflow_report": _optional_path(),
    # flags
    "fn_flag": _bool(),
    "gc_flag": _bool(),
    "shared_overflow": _bool(),
    # counts and sizes
    "device_number": _int(1),
    "grad_accumulation_step": _int(1, INT32_MAX),
    "param_groups": _int(1),
    "total_steps": _int(1, INT32_MAX),
    "n_components": _int(1),
    "interval": _int(1),
    "batch_size": _int(1),
    "rank_size": _int(1),
    "epochs": _int(1),
    "steps_per_epoch": _int(1),
    "seed": _int(0, SEED_MAX),
    "timeout": _int(0),
    # gradient freezing
    "freeze_type": _choice(0, 1, 2, 3, "auto", words="one of 0, 1, 2, 3, 'auto' (0 continuous, 1 interval, "
                                                       "2 progressive, 3 or 'auto' automatic)"),
    "auto_interval_share": _number("a number in (0, 1] (a share of the run's updates)", lambda v: 0 < v <= 1),
    "auto_warmup_share": _number("a number in [0, 1) (a share of the run's updates)", lambda v: 0 <= v < 1),
    "auto_threshold": _number("a number > 0 (a share of the weights' size per 100 updates)", lambda v: v > 0),
    "auto_head_ratio": _number("a number in [0, 1] (a share of the head's displacement; 0: no comparison)",
                               lambda v: 0 <= v <= 1),
    "auto_loss_drop": _number("a number in [0, 1) (a share of the first interval's mean training loss; 0: no "
                              "condition)", lambda v: 0 <= v < 1),
    "auto_loss_last_fall": _number("a number in [0, 1] (a share of the training loss's whole fall since the first "
                                   "interval; 1: no condition)", lambda v: 0 <= v <= 1),
    "cache_frozen_prefix": _choice(True, False, "auto", words="true, false or 'auto' (cache where the network "
                                   "has the stages and the run measures that it pays)"),
    "payback": _bool(),
    "cache_max_mb": _int(1),
    "freeze_p": _number("a number in [0, 1]", lambda v: 0 <= v <= 1),
    # DimReduce
    "rho": _number(_UNIT_OPEN, lambda v: 0 < v < 1),
    "gamma": _number(_UNIT_OPEN, lambda v: 0 < v < 1),
    "sigma": _number(_UNIT_OPEN, lambda v: 0 < v < 1),
    "alpha": _number("a finite number > 0", lambda v: v > 0),
    # loss scaling
    "init": _number("a number in (0, 2**64]", lambda v: 0 < v <= MAX_LOSS_SCALE),
    "min_scale": _number("a number in (0, 2**64]", lambda v: 0 < v <= MAX_LOSS_SCALE),
    "max_scale": _number("a number in (0, 2**64]", lambda v: 0 < v <= MAX_LOSS_SCALE),
    "factor": _number("a finite number > 1", lambda v: v > 1),
    "window": _int(1, INT32_MAX),
    "hysteresis": _int(1, INT32_MAX),
    "inc": _number("a number in (0, 64] (a log2 step)", lambda v: 0 < v <= 64),
    "dec": _number("a number in (0, 64] (a log2 step)", lambda v: 0 < v <= 64),
    "sens": _number("a finite number > 0", lambda v: v > 0),
})

# Argument names that mean the same as a rule's name (constructors of MindSpore's API use other words).
_ALIASES = MappingProxyType({
    "scale_window": "window",
    "scale_factor": "factor",
    "loss_scale_value": "init",
    "init_loss_scale": "init",
    "max_accumulation_step": "grad_accumulation_step",
    "freeze_para_groups_number": "param_groups",
    "workers": "rank_size",
})


def rule_of(name):
    """The rule of argument ``name``: ``RULES[name]``, through an alias, or by the last part of a key path
    ("loss_scale.window" -> "window").

    Raises:
        KeyError: no rule has that name (a programming error: every checked argument needs a rule).
    """
    name = name.rsplit(".", 1)[-1]
    return RULES[_ALIASES.get(name, name)]


def allowed(name):
    """The allowed values of argument ``name`` in words."""
    return rule_of(name).allowed


def complies(name, value, rule=None):
    """Whether ``value`` is allowed for ``name`` (by ``rule``, a rule name, when given)."""
    return rule_of(rule or name).complies(value)


def check(who, name, value, rule=None):
    """Return ``value`` if the rule of ``name`` (or ``rule``, a rule name, when given) allows it; else raise.

    Args:
        who (str): the class or function the argument belongs to ("DynamicLossScaleUpdate", "BoostConfig").
        name (str): the argument, or a config key path ("loss_scale.window"); its last part names the rule.
        value: the value to check.
        rule (str): the rule's name, when it is not ``name``'s (the config's "boost.adasum" uses
            "feature_switch").

    Raises:
        RuleTypeError (a TypeError and a ValueError): ``value`` has the wrong type (a bool where an int is meant,
            a string where a number is meant).
        ValueError: ``value`` has the right type but is out of range (NaN and inf included).
    """
    found = rule_of(rule or name)
    if not found.accepts(value):
        raise RuleTypeError(f"For '{who}', '{name}' must be {found.allowed}, but got {value!r}.")
    if not found.fits(value):
        raise ValueError(f"For '{who}', '{name}' must be {found.allowed}, but got {value!r}.")
    return value


def check_scale_bounds(who, min_scale, loss_scale_value, max_scale, init_name="loss_scale_value"):
    """Check a loss-scale policy's floor, start and ceiling: each by its rule, then
    ``min_scale <= loss_scale_value <= max_scale`` (all in (0, 2**64]).

    Raises:
        RuleTypeError, ValueError: as ``check``, naming the argument; ValueError naming the order when it fails.
    """
    check(who, "min_scale", min_scale)
    check(who, init_name, loss_scale_value)
    check(who, "max_scale", max_scale)
    if not min_scale <= loss_scale_value <= max_scale:
        raise ValueError(f"For '{who}', 'min_scale', '{init_name}' and 'max_scale' must be in order: need "
                         f"0 < min_scale <= {init_name} <= max_scale <= 2**64, but got {min_scale}, "
                         f"{loss_scale_value}, {max_scale}.")
