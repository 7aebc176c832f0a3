"""Validated, immutable boost configuration.

The JSON format is ``mindspore.boost``'s ``boost_config_dict`` plus a top-level ``"level"`` key and an optional
``"loss_scale"`` section. Resolution follows the reference: the level gives the six feature switches; mode
``manual`` starts from the level's switches and overrides the ones the ``"boost"`` section lists,
``enable_all``/``disable_all`` force them, ``auto`` keeps the level's; with ``dim_reduce`` on, every other feature is
off. What the reference accepts and gives a meaning to works here too, with a ``BoostConfigWarning`` where it is
likely a mistake (a switch that its non-manual mode ignores, two differing accumulation step counts, accumulation
over one step). What is meaningless is an error naming the key path: unknown keys (the nearest valid key is
suggested), wrong types, out-of-range values, unknown levels and modes. Each key is checked by the rule of the same
name in ``boost_cells.rules``, the rule the constructors use for their argument of that name.

Wherever a config path is accepted, a str that is no file's path may name a config shipped with boost_cells
(``"O1"``: the shipped ``O1.json``, ``boost_cells.shipped``); an existing file wins over a name, and anything else is
a ``FileNotFoundError`` that lists the names. ``BoostConfig.level("O1")`` stays the reference's bare level.

The config in force in the process (the latest ``AutoBoost``'s) lives in ``boost_cells.config_in_force``.
"""
import copy
import difflib
import json
import os
import warnings
from types import MappingProxyType

from . import rules
from .rules import MAX_LOSS_SCALE, check_scale_bounds
from .shipped import config_file
from .user_warnings import BoostConfigWarning, warn_user

__all__ = ["BoostConfig", "LEVELS", "FEATURES", "MAX_LOSS_SCALE", "check_scale_bounds", "freeze_keys_unread"]

FEATURES = ("less_bn", "grad_freeze", "adasum", "grad_accumulation", "dim_reduce", "loss_scale_group")

# The reference's level table; read-only so no caller can mutate it for everyone else.
LEVELS = MappingProxyType({
    "O0": MappingProxyType(dict.fromkeys(FEATURES, False)),
    "O1": MappingProxyType({**dict.fromkeys(FEATURES, False), "less_bn": True, "grad_freeze": True}),
    "O2": MappingProxyType({**dict.fromkeys(FEATURES, False), "less_bn": True, "grad_freeze": True,
                            "adasum": True}),
})

MODES = ("auto", "manual", "enable_all", "disable_all")


def _warn(message):
    """A ``BoostConfigWarning`` about the config, attributed to the user's line (``warn_user``)."""
    warn_user(f"For 'BoostConfig', {message}")


class _Field:
    """One config key: its default and the name of its rule in ``boost_cells.rules`` (by default the key's own
    name), so the key and the constructor argument of the same name accept the same values."""

    def __init__(self, default, rule=None):
        self._default = copy.deepcopy(default)
        self.rule = rule

    @property
    def default(self):
        """A fresh copy of the default (a list default cannot be changed for everyone through one config)."""
        return copy.deepcopy(self._default)

    def check(self, path, value):
        """Raise (naming the key path) unless the rule allows ``value``."""
        rules.check("BoostConfig", path, value, rule=self.rule)


def _fields(**defaults):
    """A read-only section: each key with its default, checked by the rule of the same name."""
    return MappingProxyType({key: value if isinstance(value, _Field) else _Field(value)
                             for key, value in defaults.items()})


SCHEMA = MappingProxyType({
    "boost": _fields(mode="auto", **{name: _Field(False, rule="feature_switch") for name in FEATURES}),
    "common": _fields(gradient_split_groups=[50, 100], device_number=8, grad_accumulation_step=1),
    "less_bn": _fields(fn_flag=True, gc_flag=True),
    "grad_freeze": _fields(param_groups=10, freeze_type="auto", freeze_p=0.7, total_steps=65536, seed=0,
                           auto_interval_share=0.05, auto_warmup_share=0.1, auto_threshold=0.4,
                           auto_head_ratio=0.5, auto_loss_drop=0.5, auto_loss_last_fall=0.1, payback=True,
                           cache_frozen_prefix=False, cache_max_mb=2048),
    "grad_accumulation": _fields(grad_accumulation_step=1),
    "dim_reduce": _fields(rho=0.55, gamma=0.9, alpha=0.001, sigma=0.4, n_components=32, pca_mat_path=None,
                          weight_load_dir=None, timeout=1800, seed=0),
    "loss_scale": _fields(type=_Field("dynamic", rule="loss_scale_type"), init=2.0 ** 16, factor=2.0, window=2000,
                          min_scale=1.0, max_scale=2.0 ** 24, hysteresis=1, inc=0.0005, dec=1.0),
    "diagnostics": _fields(overflow_report=None),
})

# The loss_scale keys that only one policy type reads; setting one of them for another type is an error.
_LOSS_SCALE_TYPE_KEYS = MappingProxyType({"factor": ("dynamic",), "window": ("dynamic",), "hysteresis": ("dynamic",),
                                          "inc": ("log2",), "dec": ("log2",)})


# The grad_freeze keys that only some schedules read (freeze_type: 0 continuous, 1 interval, 2 progressive, 3 auto).
_FREEZE_TYPE_KEYS = MappingProxyType({"freeze_p": (0, 1, 2), "seed": (1,), "auto_interval_share": (3,),
                                      "auto_warmup_share": (3,), "auto_threshold": (3,), "auto_head_ratio": (3,),
                                      "auto_loss_drop": (3,), "auto_loss_last_fall": (3,), "payback": (3,)})
_FREEZE_TYPE_NAMES = ("continuous", "interval", "progressive", "automatic")


def freeze_keys_unread(freeze):
    """The 'grad_freeze' keys that the schedule of ``freeze`` (a validated section) does not read: ``{key: (the
    schedule's name, the names of the schedules that read it)}``."""
    schedule = 3 if freeze["freeze_type"] == "auto" else freeze["freeze_type"]
    return {key: (_FREEZE_TYPE_NAMES[schedule], tuple(_FREEZE_TYPE_NAMES[t] for t in types))
            for key, types in _FREEZE_TYPE_KEYS.items() if schedule not in types}


def _warn_unread_freeze_keys(freeze, given):
    """Warn for each key of ``given`` (the user's 'grad_freeze' section) set away from its default that the schedule
    of ``freeze`` (the validated section) does not read: likely a config written for another schedule, such as a
    reference config that sets ``freeze_p`` and relies on the reference's default schedule (interval, 1)."""
    for key, (schedule, readers) in freeze_keys_unread(freeze).items():
        if key in given and freeze[key] != SCHEMA["grad_freeze"][key].default:
            default = "" if "freeze_type" in given else \
                "; the default here when 'grad_freeze.freeze_type' is left out, where the reference's is 1, interval"
            _warn(f"'grad_freeze.{key}' ({freeze[key]!r}) is read by the {_names(readers)} only, and this config "
                  f"freezes with the {schedule} one (freeze_type {freeze['freeze_type']!r}{default}), so it has no "
                  "effect. Set 'grad_freeze.freeze_type' to the schedule it was written for.")


def _names(schedules):
    """The schedules named in a sentence: "interval schedule", "continuous, interval and progressive schedules"."""
    if len(schedules) == 1:
        return f"{schedules[0]} schedule"
    return f"{', '.join(schedules[:-1])} and {schedules[-1]} schedules"


def _fail(path, allowed, got):
    raise ValueError(f"For 'BoostConfig', '{path}' must be {allowed}, but got {got!r}.")


def _check_keys(path, given, known):
    """Reject the first unknown key, suggesting the nearest valid one."""
    for key in given:
        if key not in known:
            near = difflib.get_close_matches(str(key), list(known), n=1)
            hint = f" Did you mean '{near[0]}'?" if near else ""
            where = f"'{path}'" if path else "the top level"
            raise ValueError(f"For 'BoostConfig', unknown key '{key}' in {where}; allowed keys are "
                             f"{sorted(known)}.{hint}")


def _validate_section(name, given):
    if not isinstance(given, dict):
        _fail(name, "an object (dict)", given)
    fields = SCHEMA[name]
    _check_keys(name, given, fields)
    section = {}
    for key, field in fields.items():
        value = given.get(key, field.default)
        field.check(f"{name}.{key}", value)
        section[key] = value
    return section


def _resolve_features(level, boost, given):
    """Feature switches from the level and the 'boost' section's mode, as the reference resolves them.

    ``manual`` overrides the level's switches with those listed in ``given`` (the user's 'boost' section);
    ``enable_all``/``disable_all`` force every switch and ``auto`` keeps the level's, and under those three a
    listed switch that disagrees is ignored with a warning. With ``dim_reduce`` on, the other features are off
    (the reference's documented rule), with a warning naming the ones switched off.
    """
    mode = boost["mode"]
    forced = {"enable_all": True, "disable_all": False}.get(mode)
    features = {name: LEVELS[level][name] if forced is None else forced for name in FEATURES}
    listed = {name: boost[name] for name in FEATURES if name in given}
    if mode == "manual":
        features.update(listed)
    else:
        ignored = {name: value for name, value in listed.items() if value != features[name]}
        if ignored:
            _warn(f"mode '{mode}' with level '{level}' ignores the switches {ignored} and uses "
                  f"{ {name: features[name] for name in ignored} }; set 'boost.mode' to 'manual' to make the "
                  "listed switches count.")
    others = sorted(name for name in FEATURES if name != "dim_reduce" and features[name])
    if features["dim_reduce"] and others:
        _warn(f"'dim_reduce' is on, so the other features {others} are switched off (dim_reduce trains alone, as "
              "in mindspore.boost).")
        features = {name: name == "dim_reduce" for name in FEATURES}
    return features


def _accumulation_step(raw, sections):
    """The micro-step count: 'grad_accumulation.grad_accumulation_step', else 'common.grad_accumulation_step'
    (where the reference reads it), else 1; the former wins, with a warning, when both are given and differ."""
    in_section = raw.get("grad_accumulation", {}).get("grad_accumulation_step")
    in_common = raw.get("common", {}).get("grad_accumulation_step")
    if in_section is not None and in_common is not None and in_section != in_common:
        _warn(f"'grad_accumulation.grad_accumulation_step' ({in_section}) and 'common.grad_accumulation_step' "
              f"({in_common}) differ; using {in_section}, the 'grad_accumulation' section's.")
    step = next((value for value in (in_section, in_common) if value is not None),
                sections["grad_accumulation"]["grad_accumulation_step"])
    sections["grad_accumulation"]["grad_accumulation_step"] = step
    sections["common"]["grad_accumulation_step"] = step
    return step


def _no_duplicate_keys(pairs):
    """``json`` object hook: a key written twice would silently lose its first value."""
    out = {}
    for key, value in pairs:
        if key in out:
            raise ValueError(f"key '{key}' is given twice ({out[key]!r} and {value!r}).")
        out[key] = value
    return out


class BoostConfig:
    """An immutable, validated boost configuration.

    Build it with ``BoostConfig.from_file(path)``, ``BoostConfig.from_dict(d)`` or ``BoostConfig.level("O1")``, and a
    changed copy with ``replace(section, **values)``; ``to_dict()`` gives every key with its value and round-trips
    through ``from_dict``. ``given(path)`` tells a key the user wrote from one filled in with its default
    (``Model.train`` sets a left-out ``grad_freeze.total_steps`` from the run).

    Attributes:
        level_name (str): "O0", "O1" or "O2".
        features (Mapping[str, bool]): the six resolved feature switches.
        loss_scale (Mapping or None): the ``"loss_scale"`` section, or None when the config has none.

    Raises:
        ValueError: unknown level, mode or key, wrong type or range (the message names the key path and what is
            allowed).

    Warns:
        BoostConfigWarning: a switch that a non-manual mode ignores, 'dim_reduce' switching other features off,
            two differing accumulation step counts, accumulation over one step, a 'grad_freeze' key set that
            the config's freezing schedule does not read.
    """

    def __init__(self, raw):
        if not isinstance(raw, dict):
            raise TypeError(f"For 'BoostConfig', the config must be a dict, but got {type(raw).__name__}.")
        _check_keys("", raw, ("level", *SCHEMA))
        level = rules.check("BoostConfig", "level", raw.get("level", "O0"))
        sections = {name: _validate_section(name, raw.get(name, {})) for name in SCHEMA}
        features = _resolve_features(level, sections["boost"], raw.get("boost", {}))
        step = _accumulation_step(raw, sections)
        if features["grad_accumulation"] and step == 1:
            _warn("'grad_accumulation' is on with 'grad_accumulation_step' 1: one micro-step per update, the same as "
                  "no accumulation, so no accumulation buffers are built. Set the step count to k >= 2 to "
                  "accumulate k micro-batches per update.")
        if features["grad_freeze"]:
            _warn_unread_freeze_keys(sections["grad_freeze"], raw.get("grad_freeze", {}))
        scale = sections["loss_scale"]
        for key, types in _LOSS_SCALE_TYPE_KEYS.items():
            if key in raw.get("loss_scale", {}) and scale[key] != SCHEMA["loss_scale"][key].default \
                    and scale["type"] not in types:
                _fail(f"loss_scale.{key}", f"left at its default {SCHEMA['loss_scale'][key].default!r} unless "
                      f"'loss_scale.type' is {' or '.join(repr(t) for t in types)} (type is {scale['type']!r})",
                      scale[key])
        if "loss_scale" in raw and scale["min_scale"] > scale["max_scale"]:
            _fail("loss_scale.min_scale", f"<= 'loss_scale.max_scale' ({scale['max_scale']})", scale["min_scale"])
        if "loss_scale" in raw and not scale["min_scale"] <= scale["init"] <= scale["max_scale"]:
            _fail("loss_scale.init", f"in [min_scale, max_scale] = [{scale['min_scale']}, {scale['max_scale']}]",
                  scale["init"])
        self._level = level
        self._features = MappingProxyType(features)
        self._has_loss_scale = "loss_scale" in raw
        self._given = frozenset(f"{name}.{key}" for name in SCHEMA for key in raw.get(name, {}))
        self._sections = MappingProxyType({name: MappingProxyType(value) for name, value in sections.items()})

    @classmethod
    def from_dict(cls, config, level=None):
        """Validate ``config``. ``level`` (e.g. ``AutoBoost``'s or ``Model``'s argument) gives the level when the
        config has no ``"level"`` key, as the reference's level-less config files expect; a ``"level"`` key that
        differs from it is an error."""
        if not isinstance(config, dict):
            raise TypeError(f"For 'BoostConfig', the config must be a dict, but got {type(config).__name__}.")
        if level is not None:
            if "level" in config and config["level"] != level:
                raise ValueError(f"For 'BoostConfig', the level argument {level!r} disagrees with the config's "
                                 f"'level' key {config['level']!r}.")
            config = {**config, "level": level}
        return cls(config)

    @classmethod
    def from_file(cls, path, level=None):
        """Load and validate a JSON config file; ``level`` as in ``from_dict``. ``path`` is a file path or, as a str
        that is no file's path, the name of a config shipped with boost_cells (``"O1"``: the shipped ``O1.json``, see
        ``boost_cells.shipped``); an existing file wins over a name. Every error about the file's content (not JSON,
        not UTF-8, not an object, a key given twice, a bad key) is a ValueError naming the file.

        Raises:
            FileNotFoundError: ``path`` is neither an existing file nor a shipped config's name (the message lists
                the names).
        """
        return cls._load(path, level, "path")

    @classmethod
    def _load(cls, path, level, arg):
        """``from_file`` for the argument named ``arg`` (``coerce``'s caller's name for it)."""
        path = config_file(path, arg)
        with open(path, "rb") as handle:
            data = handle.read()
        try:
            raw = json.loads(data.decode("utf-8"), object_pairs_hook=_no_duplicate_keys)
        except (json.JSONDecodeError, UnicodeDecodeError) as error:
            raise ValueError(f"For 'BoostConfig', '{path}' is not valid JSON: {error}") from error
        except ValueError as error:  # a duplicate key
            raise ValueError(f"For 'BoostConfig', in config file '{path}': {error}") from error
        if not isinstance(raw, dict):
            raise ValueError(f"For 'BoostConfig', config file '{path}' must hold a JSON object, but holds "
                             f"{type(raw).__name__}.")
        try:
            return cls.from_dict(raw, level=level)
        except ValueError as error:
            raise ValueError(f"{error} (config file '{path}')") from error

    @classmethod
    def level(cls, level):
        """The default config of a level ("O0", "O1" or "O2")."""
        return cls({"level": level})

    @classmethod
    def coerce(cls, config, level=None, arg="boost_config"):
        """A BoostConfig from a BoostConfig, a dict, a JSON file path or a shipped config's name (as ``from_file``);
        ``level`` as in ``from_dict`` (a BoostConfig must already have that level). ``arg`` is the caller's name for
        ``config``, which the errors name."""
        if isinstance(config, BoostConfig):
            if level is not None and config.level_name != level:
                raise ValueError(f"For 'BoostConfig', the level argument {level!r} disagrees with the config's "
                                 f"level {config.level_name!r}.")
            return config
        if isinstance(config, dict):
            return cls.from_dict(config, level=level)
        if isinstance(config, (str, os.PathLike)):
            return cls._load(config, level, arg)
        raise TypeError(f"For 'BoostConfig', '{arg}' must be a BoostConfig, a dict, a JSON file path or a shipped "
                        f"config's name, but got {type(config).__name__}.")

    @property
    def level_name(self):
        """The level, "O0", "O1" or "O2"."""
        return self._level

    @property
    def features(self):
        """The six resolved feature switches (read-only mapping)."""
        return self._features

    @property
    def loss_scale(self):
        """The validated ``"loss_scale"`` section, or None when the config has none."""
        return self._sections["loss_scale"] if self._has_loss_scale else None

    @property
    def accumulation_steps(self):
        """Micro-steps per update: the configured step count with 'grad_accumulation' on, else 1."""
        return self._sections["grad_accumulation"]["grad_accumulation_step"] if self._features["grad_accumulation"] \
            else 1

    def enabled(self, feature):
        """Whether ``feature`` (one of FEATURES) is switched on."""
        return self._features[feature]

    def section(self, name):
        """The validated section ``name`` (every key present, defaults filled in)."""
        return self._sections[name]

    def given(self, path):
        """Whether the key ``path`` ("section.key", e.g. "grad_freeze.total_steps") was written in the dict or file
        this config was built from, rather than filled in with its default. (``to_dict`` writes every key, so a
        config rebuilt from it has every key given.)

        Raises:
            ValueError: ``path`` is not a "section.key" path of the schema (the message lists the allowed ones).
        """
        section, _, key = str(path).partition(".")
        if key not in SCHEMA.get(section, {}):
            raise ValueError(f"For 'BoostConfig.given', 'path' must be a key path 'section.key' with section in "
                             f"{sorted(SCHEMA)} and a key of that section, but got {path!r}.")
        return path in self._given

    def replace(self, section, **values):
        """This config with ``values`` set in ``section`` (checked as ``from_dict`` checks them). The keys set count as
        given (written, not defaults); every other key keeps what ``given`` said of it, so the keys the user left out
        stay left out (a ``from_dict(to_dict())`` round trip gives every key). ``Model.train`` fits ``grad_freeze`` to
        its run with it. The warnings given when this config was built are not repeated.

        Raises:
            ValueError: an unknown section or key, or a value its rule refuses (naming the key path).
        """
        raw = self.to_dict()
        raw.setdefault(section, {}).update(values)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", BoostConfigWarning)
            config = BoostConfig(raw)
        # Built from to_dict, every key of `config` counts as given; restore what the user wrote (the one write
        # after __init__, on a config no caller has seen yet).
        object.__setattr__(config, "_given", self._given | {f"{section}.{key}" for key in values})
        return config

    def to_dict(self):
        """Every key with its value; ``BoostConfig.from_dict(c.to_dict()) == c``."""
        out = {"level": self._level}
        for name, section in self._sections.items():
            if name == "loss_scale" and not self._has_loss_scale:
                continue
            out[name] = copy.deepcopy(dict(section))
        out["boost"].update(self._features)
        return out

    def __eq__(self, other):
        return isinstance(other, BoostConfig) and self.to_dict() == other.to_dict()

    def __hash__(self):
        return hash(json.dumps(self.to_dict(), sort_keys=True))

    def __repr__(self):
        on = [name for name in FEATURES if self._features[name]]
        return f"BoostConfig(level={self._level!r}, features={on})"

    def __setattr__(self, name, value):
        if name.startswith("_") and not hasattr(self, "_sections"):
            object.__setattr__(self, name, value)
            return
        raise AttributeError("BoostConfig is immutable; build a new one with BoostConfig.from_dict.")
