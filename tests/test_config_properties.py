"""Generated configs, valid and invalid (Hypothesis): each one gives a BoostConfig that round-trips exactly, or a
ValueError naming a key path that is really wrong; never another exception, never a silent default for a key the
user wrote.

The documents come from docs/configs.md's key table (every key, its type and range), written out here as an
independent oracle: ``expected_errors`` lists the key paths a document gets wrong. Documents are drawn near the
valid ones (every key, random subsets, valid values) and then damaged at any depth: unknown keys at the top and in
sections, sections that are not objects, wrong types (bool for int, strings for numbers, nested lists, objects),
NaN and infinities, huge and negative numbers, empty sections, and a ``level`` argument that disagrees with the
file. Only the public API is used (``BoostConfig.from_dict/from_file/to_dict``, ``BoostConfigWarning``).
"""
import json
import math
import warnings

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from boost_cells import BoostConfig, BoostConfigWarning
from tests import figures
from tests.conftest import examples, huge_ints, json_values, specials

pytestmark = pytest.mark.slow  # Hypothesis properties: 500 generated documents

FEATURES = ("less_bn", "grad_freeze", "adasum", "grad_accumulation", "dim_reduce", "loss_scale_group")
LEVELS = ("O0", "O1", "O2")
MAX_SCALE = 2.0 ** 64


def is_int(v):
    return isinstance(v, int) and not isinstance(v, bool)


def is_number(v):
    """A real, finite number (JSON int or float; an int too large for a float is not finite as a float)."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return False
    try:
        return math.isfinite(float(v))
    except OverflowError:
        return False


def int_at_least(low, high=None):
    return lambda v: is_int(v) and v >= low and (high is None or v <= high)


INT32_MAX, SEED_MAX = 2 ** 31 - 1, 2 ** 32 - 1   # int32 counters; NumPy's RandomState seed


def number_in(low, high, low_open=False, high_open=False):
    def check(v):
        if not is_number(v):
            return False
        above = v > low if low_open else v >= low
        below = high is None or (v < high if high_open else v <= high)
        return above and below
    return check


def one_of(*choices):
    """Exactly one of ``choices``, compared with their type (True is not 1, 1.0 is not 1)."""
    return lambda v: any(type(v) is type(c) and v == c for c in choices)


def is_bool(v):
    return isinstance(v, bool)


def path_or_null(v):
    return v is None or isinstance(v, str)


def split_groups(v):
    return isinstance(v, list) and all(is_int(i) and i > 0 for i in v) and v == sorted(set(v))


# docs/configs.md's key table: section -> key -> (default, validity of a value on its own).
SPEC = {
    "boost": {"mode": ("auto", one_of("auto", "manual", "enable_all", "disable_all")),
              **{name: (False, is_bool) for name in FEATURES}},
    "common": {"gradient_split_groups": ([50, 100], split_groups), "device_number": (8, int_at_least(1)),
               "grad_accumulation_step": (1, int_at_least(1, INT32_MAX))},
    "less_bn": {"fn_flag": (True, is_bool), "gc_flag": (True, is_bool)},
    "grad_freeze": {"param_groups": (10, int_at_least(1)), "freeze_type": ("auto", one_of(0, 1, 2, 3, "auto")),
                    "freeze_p": (0.7, number_in(0, 1)), "total_steps": (65536, int_at_least(1, INT32_MAX)),
                    "seed": (0, int_at_least(0, SEED_MAX))},
    "grad_accumulation": {"grad_accumulation_step": (1, int_at_least(1, INT32_MAX))},
    "dim_reduce": {"rho": (0.55, number_in(0, 1, True, True)), "gamma": (0.9, number_in(0, 1, True, True)),
                   "alpha": (0.001, number_in(0, None, True)), "sigma": (0.4, number_in(0, 1, True, True)),
                   "n_components": (32, int_at_least(1)), "pca_mat_path": (None, path_or_null),
                   "weight_load_dir": (None, path_or_null), "timeout": (1800, int_at_least(0)),
                   "seed": (0, int_at_least(0, SEED_MAX))},
    "loss_scale": {"type": ("dynamic", one_of("dynamic", "static", "log2")),
                   "init": (2.0 ** 16, number_in(0, MAX_SCALE, True)),
                   "factor": (2.0, number_in(1, None, True)), "window": (2000, int_at_least(1, INT32_MAX)),
                   "min_scale": (1.0, number_in(0, MAX_SCALE, True)),
                   "max_scale": (2.0 ** 24, number_in(0, MAX_SCALE, True)),
                   "hysteresis": (1, int_at_least(1, INT32_MAX)),
                   "inc": (0.0005, number_in(0, 64, True)), "dec": (1.0, number_in(0, 64, True))},
    "diagnostics": {"overflow_report": (None, path_or_null)},
}
TYPE_KEYS = {"factor": "dynamic", "window": "dynamic", "hysteresis": "dynamic", "inc": "log2", "dec": "log2"}


def expected_errors(doc, level_arg=None):
    """The key paths ``doc`` gets wrong: tuples ``("level",)``, ``(key,)`` for an unknown top-level key,
    ``(section,)`` for a section that is not an object, ``(section, key)``."""
    errors = set()
    for key in doc:
        if key != "level" and key not in SPEC:
            errors.add((key,))
    if level_arg is not None and "level" in doc and doc["level"] != level_arg:
        errors.add(("level",))
    level = doc.get("level", level_arg if level_arg is not None else "O0")
    if not one_of(*LEVELS)(level):
        errors.add(("level",))
    for section, fields in SPEC.items():
        if section not in doc:
            continue
        given_section = doc[section]
        if not isinstance(given_section, dict):
            errors.add((section,))
            continue
        for key, value in given_section.items():
            if key not in fields or not fields[key][1](value):
                errors.add((section, key))
    scale = doc.get("loss_scale")
    if isinstance(scale, dict) and not any(path[:1] == ("loss_scale",) for path in errors):
        full = {key: scale.get(key, default) for key, (default, _) in SPEC["loss_scale"].items()}
        for key, kind in TYPE_KEYS.items():
            if key in scale and scale[key] != SPEC["loss_scale"][key][0] and full["type"] != kind:
                errors.add(("loss_scale", key))
        if full["min_scale"] > full["max_scale"]:
            errors.add(("loss_scale", "min_scale"))
        elif not full["min_scale"] <= full["init"] <= full["max_scale"]:
            errors.add(("loss_scale", "init"))
    return errors


def names(message, path):
    """Whether an error message names ``path`` (in one of BoostConfig's message shapes)."""
    if len(path) == 2:
        section, key = path
        return f"'{section}.{key}'" in message or (f"unknown key '{key}'" in message and f"'{section}'" in message)
    key = path[0]
    return f"'{key}'" in message


def same(a, b):
    """Equal with the same types all the way down (1 is not 1.0, True is not 1)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    return a == b


# --- values (huge_ints, specials, json_values: in tests/conftest.py, shared) -------------------------------------

def valid_value(section, key):
    """Values a key takes on its own, at the edges of its range included."""
    default, check = SPEC[section][key]
    if check is is_bool:
        candidates = st.booleans()
    elif isinstance(default, str) or key == "freeze_type":
        candidates = st.sampled_from({"mode": ["auto", "manual", "enable_all", "disable_all"],
                                     "type": ["dynamic", "static", "log2"], "freeze_type": [0, 1, 2, 3, "auto"]}[key])
    elif default is None:
        candidates = st.one_of(st.none(), st.text(max_size=8))
    elif key == "gradient_split_groups":
        candidates = st.lists(st.integers(1, 500), max_size=4, unique=True).map(sorted)
    elif is_int(default):
        candidates = st.one_of(st.integers(0, 9), st.integers(0, 2 ** 40), huge_ints,
                               st.sampled_from([INT32_MAX, INT32_MAX + 1, SEED_MAX, SEED_MAX + 1]))
    else:
        candidates = st.one_of(st.floats(-1e20, 1e20), st.floats(0, 1), st.floats(1, 64), st.integers(-5, 5), specials,
                               st.sampled_from([0.5, 1.0, 2.0, 64.0, 1e-30, 2.0 ** 64]))
    return candidates.filter(check)


@st.composite
def loss_scale_sections(draw):
    """A valid loss_scale section: min <= init <= max, and keys of the other types left out or at default."""
    kind = draw(st.sampled_from(["dynamic", "static", "log2"]))
    section = {}
    if draw(st.booleans()):
        section["type"] = kind
    bounds = sorted(draw(st.lists(st.one_of(st.floats(1e-30, MAX_SCALE), st.sampled_from([1.0, 1024, MAX_SCALE])),
                                  min_size=3, max_size=3)))
    for key, value in zip(("min_scale", "init", "max_scale"), bounds):
        section[key] = value
    # sorted: a set's order follows the string hash seed, and the draws after it must not (deterministic CI)
    for key in sorted(draw(st.sets(st.sampled_from(sorted(TYPE_KEYS)), max_size=3))):
        if TYPE_KEYS[key] == kind:
            section[key] = draw(valid_value("loss_scale", key))
        else:
            section[key] = SPEC["loss_scale"][key][0]
    drop = draw(st.sets(st.sampled_from(["min_scale", "init", "max_scale"]), max_size=3))
    if drop:  # a dropped bound takes its default, which must still hold the order
        trial = {key: value for key, value in section.items() if key not in drop}
        full = {key: trial.get(key, SPEC["loss_scale"][key][0]) for key in ("min_scale", "init", "max_scale")}
        if full["min_scale"] <= full["init"] <= full["max_scale"]:
            section = trial
    return section


@st.composite
def valid_documents(draw):
    """A document every key of which is valid: random sections, random subsets of keys, valid values."""
    doc = {}
    if draw(st.booleans()):
        doc["level"] = draw(st.sampled_from(LEVELS))
    for section in sorted(draw(st.sets(st.sampled_from(sorted(SPEC)), max_size=len(SPEC)))):
        if section == "loss_scale":
            doc[section] = draw(loss_scale_sections())
            continue
        keys = draw(st.sets(st.sampled_from(sorted(SPEC[section])), max_size=len(SPEC[section])))
        doc[section] = {key: draw(valid_value(section, key)) for key in sorted(keys)}
    return doc


@st.composite
def damaged_documents(draw):
    """A valid document with 1 to 3 kinds of damage, at the top, at a section or at a key."""
    doc = draw(valid_documents())
    for _ in range(draw(st.integers(1, 3))):
        where = draw(st.sampled_from(["unknown top key", "unknown section key", "section value", "key value",
                                      "level value", "typo"]))
        if where == "unknown top key":
            doc[draw(st.text(min_size=1, max_size=8))] = draw(json_values)
        elif where == "level value":
            doc["level"] = draw(json_values)
        else:
            section = draw(st.sampled_from(sorted(SPEC)))
            if where == "section value":
                doc[section] = draw(json_values)
                continue
            target = doc.setdefault(section, {})
            if not isinstance(target, dict):
                continue
            if where == "unknown section key":
                target[draw(st.text(min_size=1, max_size=8))] = draw(json_values)
            elif where == "typo":  # a misspelt key: one letter dropped or doubled
                key = draw(st.sampled_from(sorted(SPEC[section])))
                cut = draw(st.integers(0, len(key) - 1))
                target[key[:cut] + key[cut + 1:] if draw(st.booleans()) else key[:cut] + key[cut] * 2 + key[cut + 1:]] \
                    = SPEC[section][key][0]
            else:
                target[draw(st.sampled_from(sorted(SPEC[section])))] = draw(json_values)
    return doc


level_args = st.one_of(st.none(), st.sampled_from(LEVELS), st.sampled_from(["O3", "o1", "", "O 1"]))


# --- the properties ---------------------------------------------------------------------------------------------

def build(doc, level_arg):
    """``(config or None, error or None, warning messages)``; any exception other than ValueError fails."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            config = BoostConfig.from_dict(doc, level=level_arg)
        except ValueError as error:
            return None, str(error), []
    messages = [str(w.message) for w in caught if issubclass(w.category, BoostConfigWarning)]
    return config, None, messages


def check_round_trip(config):
    """to_dict -> from_dict and to_dict -> JSON text -> from_dict give the same config, types included."""
    out = config.to_dict()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", BoostConfigWarning)
        again = BoostConfig.from_dict(out)
        text = BoostConfig.from_dict(json.loads(json.dumps(out, allow_nan=False)))
    assert again == config and text == config
    assert same(again.to_dict(), out) and same(text.to_dict(), out)


def check_no_silent_default(doc, level_arg, config, messages):
    """Every key the user wrote has the value they wrote, or a BoostConfigWarning names it."""
    out = config.to_dict()
    assert out["level"] == doc.get("level", level_arg if level_arg is not None else "O0")
    for section, given_section in doc.items():
        if section == "level":
            continue
        for key, value in given_section.items():
            if same(out[section][key], value):
                continue
            assert any(f"'{key}'" in m or f"'{section}.{key}'" in m for m in messages), \
                f"{section}.{key}={value!r} became {out[section][key]!r} with no warning naming it: {messages}"


def check(doc, level_arg):
    errors = expected_errors(doc, level_arg)
    config, error, messages = build(doc, level_arg)
    figures.add("config documents generated: refused (ValueError naming a wrong key)" if errors
                else "config documents generated: accepted (round trip, every written key kept)")
    if errors:
        assert error is not None, f"accepted a config with wrong keys {sorted(errors)}: {doc!r}"
        assert any(names(error, path) for path in errors), f"{error!r} names none of {sorted(errors)}"
        assert error.startswith("For 'BoostConfig'")
    else:
        assert error is None, f"refused a valid config {doc!r}: {error}"
        check_round_trip(config)
        check_no_silent_default(doc, level_arg, config, messages)


@settings(max_examples=examples(150))
@given(doc=valid_documents(), level_arg=st.one_of(st.none(), st.sampled_from(LEVELS)))
def test_valid_documents_round_trip_and_keep_every_written_key(doc, level_arg):
    check(doc, level_arg)


@settings(max_examples=examples(250))
@given(doc=damaged_documents(), level_arg=level_args)
def test_damaged_documents_raise_value_error_naming_a_wrong_key(doc, level_arg):
    check(doc, level_arg)


@settings(max_examples=examples(100))
@given(doc=st.one_of(json_values, st.dictionaries(st.sampled_from(["level", *SPEC, "Level", "boost "]), json_values,
                                                  max_size=4)),
       level_arg=level_args)
def test_any_json_document_is_a_config_or_a_value_error(doc, level_arg):
    """Arbitrary JSON, not only objects: a non-object document is a TypeError from from_dict (a programming error:
    the argument is not a dict), and from a file a ValueError naming the file (tests/test_files.py)."""
    if not isinstance(doc, dict):
        figures.add("config documents generated: not an object (TypeError from from_dict)")
        with pytest.raises(TypeError, match="the config must be a dict"):
            BoostConfig.from_dict(doc, level=level_arg)
        return
    check(doc, level_arg)
