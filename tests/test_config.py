"""BoostConfig and AutoBoost: resolution rules, strict validation, round trips, no shared mutable state."""
import json
import re
import warnings
from pathlib import Path

import pytest

from boost_cells import AutoBoost, BoostConfig, BoostTrainOneStepCell
from boost_cells.config import FEATURES, LEVELS
from boost_cells.user_warnings import BoostConfigWarning
from boost_cells.train_cells import resolve_config

CONFIGS = Path(__file__).resolve().parent.parent / "configs"
OFF = dict.fromkeys(FEATURES, False)


def test_levels_match_reference_table():
    assert dict(BoostConfig.level("O0").features) == OFF
    assert dict(BoostConfig.level("O1").features) == {**OFF, "less_bn": True, "grad_freeze": True}
    assert dict(LEVELS["O2"]) == {**OFF, "less_bn": True, "grad_freeze": True, "adasum": True}


@pytest.mark.parametrize("mode, expected", [
    ("manual", {**OFF, "adasum": True, "grad_accumulation": True}),
    ("disable_all", OFF),
])
def test_mode_resolution(mode, expected):
    boost = {"mode": mode}
    if mode == "manual":
        boost.update(adasum=True, grad_accumulation=True)
    config = BoostConfig.from_dict({"level": "O0", "boost": boost,
                                    "grad_accumulation": {"grad_accumulation_step": 2}})
    assert dict(config.features) == expected


def test_manual_mode_starts_from_the_level():
    """As the reference: the level's switches, overridden by the ones the 'boost' section lists."""
    config = BoostConfig.from_dict({"level": "O2", "boost": {"mode": "manual", "less_bn": False,
                                                             "grad_freeze": False}})
    assert dict(config.features) == {**OFF, "adasum": True}
    config = BoostConfig.from_dict({"level": "O0", "boost": {"mode": "manual", "adasum": True}})
    assert dict(config.features) == {**OFF, "adasum": True}


@pytest.mark.parametrize("raw, fragment", [
    ({"level": "O3"}, "'level' must be one of 'O0', 'O1', 'O2'"),
    ({"boost": {"mode": "fast"}}, "'boost.mode' must be one of"),
    ({"boost": {"mode": "manual", "adasun": True}}, "Did you mean 'adasum'"),
    ({"comon": {}}, "Did you mean 'common'"),
    ({"common": {"device_number": 0}}, "'common.device_number' must be an int >= 1"),
    ({"common": {"device_number": 2.0}}, "'common.device_number' must be an int >= 1"),
    ({"common": {"device_number": True}}, "'common.device_number' must be an int >= 1"),
    ({"common": {"gradient_split_groups": [100, 50]}}, "'common.gradient_split_groups'"),
    ({"grad_freeze": {"freeze_p": 1.5}}, "'grad_freeze.freeze_p' must be a number in \\[0, 1\\]"),
    ({"common": {"grad_accumulation_step": 0}}, r"'common.grad_accumulation_step' must be an int in \[1, 2147483647\]"),
    ({"grad_accumulation": {"grad_accumulation_step": 2.5}}, "'grad_accumulation.grad_accumulation_step' must be"),
    ({"boost": {"mode": "manual", "grad_accumulation": "yes"}}, "'boost.grad_accumulation' must be a bool"),
    ({"loss_scale": {"type": "dyn"}}, "'loss_scale.type' must be one of 'dynamic', 'static'"),
    ({"loss_scale": {"factor": 1.0}}, "'loss_scale.factor' must be a finite number > 1"),
    ({"loss_scale": {"init": 8.0, "min_scale": 16.0, "max_scale": 4.0}}, "'loss_scale.min_scale' must be <="),
    ({"loss_scale": {"init": 8.0, "min_scale": 16.0}}, "'loss_scale.init' must be in \\[min_scale"),
    ({"loss_scale": {"init": 2.0 ** 30}}, "'loss_scale.init' must be in"),
    ({"loss_scale": {"window": 0}}, r"'loss_scale.window' must be an int in \[1, 2147483647\]"),
    ({"loss_scale": {"max_scale": 1e300}}, "'loss_scale.max_scale' must be a number in \\(0, 2\\*\\*64\\]"),
    ({"dim_reduce": {"rho": 2}}, "'dim_reduce.rho' must be a number in \\(0, 1\\)"),
])
def test_bad_input_names_the_key(raw, fragment):
    with pytest.raises(ValueError, match=fragment):
        BoostConfig.from_dict(raw)


def test_type_errors():
    with pytest.raises(TypeError, match="must be a dict"):
        BoostConfig.from_dict([("level", "O0")])
    with pytest.raises(TypeError, match="'boost_config' must be a BoostConfig, a dict, a JSON file path or a shipped "
                                        "config's name, but got int"):
        BoostConfig.coerce(3)
    with pytest.raises(ValueError, match="disagrees"):
        BoostConfig.from_dict({"level": "O0"}, level="O2")


def test_reference_docstring_example_is_accepted():
    """The reference recommends mode 'auto' with every switch listed false; agreeing switches are fine."""
    raw = {"boost": {"mode": "auto", **OFF}, "common": {"gradient_split_groups": [50, 100], "device_number": 8}}
    assert dict(AutoBoost("O0", raw).boost_config) == OFF


def test_round_trip_and_immutability(tmp_path):
    config = BoostConfig.from_dict({"boost": {"mode": "manual", "grad_accumulation": True},
                                    "grad_accumulation": {"grad_accumulation_step": 3},
                                    "loss_scale": {"type": "static", "init": 128.0}})
    assert BoostConfig.from_dict(config.to_dict()) == config
    path = tmp_path / "c.json"
    path.write_text(json.dumps(config.to_dict()))
    assert BoostConfig.from_file(path) == config
    with pytest.raises(AttributeError, match="immutable"):
        config.extra = 1
    with pytest.raises(TypeError):
        config.section("common")["device_number"] = 4
    config.to_dict()["grad_accumulation"]["grad_accumulation_step"] = 99
    assert config.section("grad_accumulation")["grad_accumulation_step"] == 3


def test_given_tells_written_keys_from_defaults(tmp_path):
    """given(path): the keys the user wrote, not the defaults filled in; every key after a to_dict round trip (which
    stays equal to the original); a path outside the schema is an error naming the path."""
    raw = {"level": "O1", "grad_freeze": {"freeze_type": 2, "freeze_p": 0.5}}
    config = BoostConfig.from_dict(raw)
    assert config.given("grad_freeze.freeze_type") and config.given("grad_freeze.freeze_p")
    assert not config.given("grad_freeze.total_steps") and not config.given("less_bn.fn_flag")
    path = tmp_path / "c.json"
    path.write_text(json.dumps(raw))
    assert not BoostConfig.from_file(path).given("grad_freeze.total_steps")
    again = BoostConfig.from_dict(config.to_dict())
    assert again == config and again.given("grad_freeze.total_steps")
    for bad in ("grad_freeze.totl_steps", "grad_freeze", "freeze.total_steps", "level"):
        with pytest.raises(ValueError, match=re.escape(repr(bad))):
            config.given(bad)


def test_file_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        BoostConfig.from_file(tmp_path / "missing.json")
    bad = tmp_path / "bad.json"
    bad.write_text("{level: O0")
    with pytest.raises(ValueError, match="not valid JSON"):
        BoostConfig.from_file(bad)


@pytest.mark.parametrize("name", sorted(path.stem for path in CONFIGS.glob("*.json")))
def test_a_shipped_config_by_name(name):
    """A shipped file's stem, given where a config path is accepted, is that file, on every way in."""
    expected = BoostConfig.from_file(CONFIGS / f"{name}.json")
    assert BoostConfig.from_file(name) == expected
    assert BoostConfig.coerce(name) == expected
    assert AutoBoost(expected.level_name, name).config == expected
    assert resolve_config(name) == expected  # a train cell's boost_config=


def test_a_name_is_not_the_bare_level():
    """``BoostConfig.level("O1")`` stays the reference's level; "O1" as a config is the shipped, tuned file."""
    assert BoostConfig.level("O1").enabled("less_bn") and not BoostConfig.from_file("O1").enabled("less_bn")
    assert BoostConfig.from_file("O1") != BoostConfig.level("O1")


def test_an_existing_path_wins_over_a_name(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "O1").write_text(json.dumps({"level": "O0"}))
    assert BoostConfig.from_file("O1") == BoostConfig.level("O0")
    assert AutoBoost("O0", "O1").config == BoostConfig.level("O0")


def test_an_unknown_name_lists_the_shipped_names(tmp_path, monkeypatch):
    """An unknown name (or a path that is not there) is a FileNotFoundError naming the argument, the shipped names
    and that a path is accepted too, with the nearest name when there is one; a path object is never a name."""
    monkeypatch.chdir(tmp_path)
    names = ", ".join(sorted(path.stem for path in CONFIGS.glob("*.json")))
    with pytest.raises(FileNotFoundError) as raised:
        BoostConfig.from_file("O5")
    assert str(raised.value) == (
        "For 'BoostConfig', 'path': config file 'O5' does not exist, and it is not the name of a config shipped with "
        f"boost_cells. Give a path to a JSON config file or one of the shipped names: {names} (python -m boost_cells "
        "configs lists them).")
    for where, call in [("boost_config_dict", lambda: AutoBoost("O1", "o1")),
                        ("boost_config", lambda: resolve_config("o1"))]:
        with pytest.raises(FileNotFoundError, match=f"'{where}': config file 'o1' does not exist.*shipped names: "
                                                    f"{names} .*Did you mean the shipped config 'O1'"):
            call()
    with pytest.raises(FileNotFoundError, match="'configs/O1.json' does not exist.*Did you mean the shipped config "
                                                "'O1'"):
        BoostConfig.from_file("configs/O1.json")  # the repository's path, from outside the repository
    with pytest.raises(FileNotFoundError, match="'nothing_like_it' does not exist.*configs lists them\\)\\.$"):
        BoostConfig.from_file("nothing_like_it")
    with pytest.raises(FileNotFoundError, match="config file 'O1' does not exist. A path object is always a path"):
        BoostConfig.from_file(Path("O1"))


@pytest.mark.parametrize("path", sorted(CONFIGS.glob("*.json")), ids=lambda p: p.name)
def test_shipped_configs_spell_out_every_key(path):
    """Every key is written out, but the level configs (O1.json, O2.json) leave ``grad_freeze.total_steps`` to the
    run: ``Model.train`` sets it from its epochs and dataset, so their automatic schedule's shares are of this run.
    A level config switches on its level's features but LessBN, which they leave off (``boost.mode`` manual): on
    this CPU it cost every benchmark workload time, for accuracy within a test image or two."""
    raw = json.loads(path.read_text())
    config = BoostConfig.from_file(path)
    expected = config.to_dict()
    if path.stem in LEVELS and path.stem != "O0":
        del expected["grad_freeze"]["total_steps"]
        assert not config.given("grad_freeze.total_steps")
        assert dict(config.features) == {**LEVELS[path.stem], "less_bn": False}
    assert raw == expected


def test_replace_sets_keys_and_keeps_what_the_user_left_out():
    """replace(section, **values): the values set (and checked by their rules, naming the key path), the keys set
    given, every other key as given or left out as before (a to_dict round trip would give every key); the
    config's warnings are not repeated."""
    with pytest.warns(BoostConfigWarning):
        config = BoostConfig.from_dict({"level": "O1", "boost": {"adasum": True}, "grad_freeze": {"freeze_p": 0.5}})
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        fitted = config.replace("grad_freeze", total_steps=528)
    assert fitted.section("grad_freeze")["total_steps"] == 528 and fitted.given("grad_freeze.total_steps")
    assert fitted.given("grad_freeze.freeze_p") and not fitted.given("grad_freeze.seed")
    assert not fitted.given("less_bn.fn_flag") and fitted.features == config.features
    assert config.section("grad_freeze")["total_steps"] == 65536 and not config.given("grad_freeze.total_steps")
    with pytest.raises(ValueError, match="'grad_freeze.total_steps' must be an int in"):
        config.replace("grad_freeze", total_steps=0)
    with pytest.raises(ValueError, match="unknown key 'total_step' in 'grad_freeze'"):
        config.replace("grad_freeze", total_step=5)


def test_autoboost_has_no_singleton_and_never_mutates_levels(graph_mode):
    """The reference's first AutoBoost wins forever and 'manual' mode writes into its level table."""
    from tests.helpers import linear_setup
    first = AutoBoost("O0", {"boost": {"mode": "manual", "grad_accumulation": True},
                             "grad_accumulation": {"grad_accumulation_step": 2}})
    second = AutoBoost("O0", {})
    assert first is not second
    assert first.boost_config["grad_accumulation"] is True
    assert second.boost_config["grad_accumulation"] is False
    assert dict(LEVELS["O0"]) == OFF
    _, net_with_loss, opt = linear_setup()
    cell = BoostTrainOneStepCell(net_with_loss, opt)  # the most recent AutoBoost applies: no accumulation
    assert not any("grad_accumulation" in p.name for p in cell.get_parameters())
    first_again = AutoBoost("O0", first.config.to_dict())
    _, net_with_loss, opt = linear_setup()
    cell = BoostTrainOneStepCell(net_with_loss, opt)
    assert any("grad_accumulation" in p.name for p in cell.get_parameters())
    assert first_again.network_auto_process_train(net_with_loss, opt) == (net_with_loss, opt)
    AutoBoost("O0")


def test_autoboost_rejects_unknown_level():
    with pytest.raises(ValueError, match="'level' must be one of"):
        AutoBoost("O4", {})


def test_switches_beside_a_non_manual_mode_are_ignored_with_a_warning():
    """The reference's documented format lists every switch beside "mode": "auto" and ignores them there."""
    with pytest.warns(BoostConfigWarning, match=r"'auto'.*ignores the switches \{'adasum': True\}.*'manual'"):
        config = BoostConfig.from_dict({"boost": {"mode": "auto", "adasum": True}})
    assert dict(config.features) == OFF
    with pytest.warns(BoostConfigWarning, match="disable_all"):
        config = BoostConfig.from_dict({"boost": {"mode": "disable_all", "grad_accumulation": True}})
    assert dict(config.features) == OFF


def test_agreeing_switches_beside_auto_give_no_warning(recwarn):
    BoostConfig.from_dict({"boost": {"mode": "auto", **OFF}})
    assert not [w for w in recwarn if issubclass(w.category, BoostConfigWarning)]


def test_accumulation_step_from_the_common_section():
    """The reference reads the step count from 'common'; its documented format has no 'grad_accumulation'
    section."""
    raw = {"boost": {"mode": "manual", "grad_accumulation": True}, "common": {"grad_accumulation_step": 4}}
    config = BoostConfig.from_dict(raw)
    assert config.accumulation_steps == 4
    assert BoostConfig.from_dict(config.to_dict()) == config


def test_differing_accumulation_steps_the_section_wins_with_a_warning():
    raw = {"boost": {"mode": "manual", "grad_accumulation": True}, "common": {"grad_accumulation_step": 4},
           "grad_accumulation": {"grad_accumulation_step": 3}}
    with pytest.warns(BoostConfigWarning, match=r"\(3\) and 'common.grad_accumulation_step' \(4\) differ; using 3"):
        config = BoostConfig.from_dict(raw)
    assert config.accumulation_steps == 3
    assert config.to_dict()["common"]["grad_accumulation_step"] == 3
    assert BoostConfig.from_dict(config.to_dict()) == config


def test_accumulation_over_one_step_warns_and_means_no_accumulation():
    with pytest.warns(BoostConfigWarning, match="'grad_accumulation_step' 1.*no accumulation buffers"):
        config = BoostConfig.from_dict({"boost": {"mode": "manual", "grad_accumulation": True}})
    assert config.enabled("grad_accumulation") and config.accumulation_steps == 1


def test_enable_all_means_dim_reduce_alone():
    """Every feature on, then the reference's rule: with dim_reduce on, the others are off."""
    with pytest.warns(BoostConfigWarning, match="'dim_reduce' is on, so the other features"):
        config = BoostConfig.from_dict({"boost": {"mode": "enable_all"}})
    assert [name for name, on in config.features.items() if on] == ["dim_reduce"]


def test_level_comes_from_the_argument_when_the_file_has_none(tmp_path):
    """The reference's config files carry no level: it comes from AutoBoost(level, ...) or Model(boost_level=)."""
    path = tmp_path / "no_level.json"
    path.write_text(json.dumps({"boost": {"mode": "manual", "less_bn": False, "grad_freeze": False}}))
    boost = AutoBoost("O2", str(path))
    assert boost.config.level_name == "O2"
    assert boost.boost_config == {**OFF, "adasum": True}
    assert BoostConfig.from_file(path).level_name == "O0"
    path.write_text(json.dumps({"level": "O0", "boost": {"mode": "manual", "less_bn": False, "grad_freeze": False}}))
    with pytest.raises(ValueError, match="level argument 'O2' disagrees with the config's 'level' key 'O0'"):
        AutoBoost("O2", str(path))
    AutoBoost("O0")


@pytest.mark.parametrize("doc, level_arg, path", [
    ({"grad_freeze": {"freeze_type": True}}, None, "'grad_freeze.freeze_type'"),   # bool taken for the int 1
    ({"grad_freeze": {"freeze_type": False}}, None, "'grad_freeze.freeze_type'"),
    ({"level": ["O1"]}, None, "'level'"),                                            # unhashable: TypeError
    ({"level": {"O1": 1}}, None, "'level'"),
    ({"dim_reduce": {"alpha": 10 ** 400}}, None, "'dim_reduce.alpha'"),              # OverflowError
    ({"grad_freeze": {"freeze_p": -(10 ** 400)}}, None, "'grad_freeze.freeze_p'"),
    ({"loss_scale": {"init": 10 ** 400}}, None, "'loss_scale.init'"),
])
def test_config_value_errors_found_by_generated_documents(doc, level_arg, path):
    """Regression, found by tests/test_config_properties.py: 'freeze_type': true was accepted as 1, a list or object
    'level' raised TypeError (unhashable), and an int too large for a float raised OverflowError. Each is a
    ValueError naming the key path now."""
    with pytest.raises(ValueError, match="For 'BoostConfig', " + path.replace(".", r"\.") + " must be"):
        BoostConfig.from_dict(doc, level=level_arg)


@pytest.mark.parametrize("content, message", [
    (b'{"level": "O1"\xff}', "is not valid JSON: 'utf-8' codec can't decode"),   # was UnicodeDecodeError, no name
    (b'["O1"]', "must hold a JSON object, but holds list"),                        # was TypeError
    (b'{"level": "O1", "level": "O2"}', "key 'level' is given twice"),            # the first value was dropped
    (b'{"grad_freeze": {"seed": -1}}', "'grad_freeze.seed' must be an int in [0, "),  # named the key, not the file
])
def test_config_file_errors_name_the_file(tmp_path, content, message):
    """Regression, found by tests/test_files.py (corrupted config files): a file that was not UTF-8 raised
    UnicodeDecodeError, a JSON array TypeError, a key given twice kept only its last value, and a bad value named
    the key but not the file. Every error about a config file's content is a ValueError naming the file now."""
    path = tmp_path / "broken.json"
    path.write_bytes(content)
    with pytest.raises(ValueError, match="broken.json") as caught:
        BoostConfig.from_file(path)
    assert message in str(caught.value)


@pytest.mark.parametrize("doc, path", [
    ({"loss_scale": {"window": 10 ** 30}}, "'loss_scale.window'"),            # RuntimeError at graph build
    ({"loss_scale": {"hysteresis": 10 ** 30}}, "'loss_scale.hysteresis'"),    # OverflowError in np.full(int32)
    ({"loss_scale": {"window": 2 ** 31}}, "'loss_scale.window'"),
    ({"grad_accumulation": {"grad_accumulation_step": 10 ** 30}}, "'grad_accumulation.grad_accumulation_step'"),
    ({"common": {"grad_accumulation_step": 2 ** 31}}, "'common.grad_accumulation_step'"),
    ({"grad_freeze": {"seed": 2 ** 32}}, "'grad_freeze.seed'"),              # numpy: "Seed must be between ..."
])
def test_config_refuses_counts_its_int32_state_cannot_hold(doc, path):
    """Regression, found by tests/test_constructor_properties.py and a build of accepted configs: these values
    passed the config and then failed when the cell was built (RuntimeError/OverflowError from the int32 counters,
    numpy's seed range). The counters are int32 Parameters, so the config now stops at 2**31 - 1 (the seed at
    2**32 - 1)."""
    with pytest.raises(ValueError, match="For 'BoostConfig', " + path.replace(".", r"\.") + " must be an int in"):
        BoostConfig.from_dict(doc)
    edge = {section: {key: (2 ** 32 - 1 if key == "seed" else 2 ** 31 - 1) for key in keys}
            for section, keys in doc.items()}
    BoostConfig.from_dict(edge)


@pytest.mark.parametrize("grad_freeze, key, schedule", [
    ({"freeze_p": 0.5}, "freeze_p", "the automatic one (freeze_type 'auto'; the default here"),
    ({"freeze_type": 0, "seed": 3}, "seed", "the continuous one (freeze_type 0)"),
    ({"freeze_type": 1, "auto_threshold": 0.3}, "auto_threshold", "the interval one (freeze_type 1)"),
])
def test_a_freeze_key_the_schedule_does_not_read_warns(grad_freeze, key, schedule):
    """A reference config that sets freeze_p and leaves freeze_type out meant the reference's default schedule
    (interval); here the default is the automatic one, which does not read freeze_p: a warning names the key, the
    schedule it got and freeze_type. Any key read only by other schedules warns the same way."""
    with pytest.warns(BoostConfigWarning, match=re.escape(f"'grad_freeze.{key}'") + ".*" + re.escape(schedule)
                      + ".*Set 'grad_freeze.freeze_type'"):
        BoostConfig.from_dict({"level": "O1", "grad_freeze": grad_freeze})


@pytest.mark.parametrize("config", [
    {"level": "O1", "grad_freeze": {"freeze_type": 1, "freeze_p": 0.5, "seed": 3}},   # the schedule reads them
    {"level": "O1", "grad_freeze": {"freeze_p": 0.7, "seed": 0}},                     # at their defaults
    {"level": "O0", "grad_freeze": {"freeze_p": 0.5}},                                # freezing is off
])
def test_freeze_keys_the_schedule_reads_or_that_are_unused_do_not_warn(config, recwarn):
    """No warning where the key is read, left at its default (the full config files list every key) or freezing is
    off."""
    BoostConfig.from_dict(config)
    assert not [w for w in recwarn if issubclass(w.category, BoostConfigWarning)]
