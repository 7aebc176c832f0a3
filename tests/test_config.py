"""BoostConfig and AutoBoost: resolution rules, strict validation, round trips, no shared mutable state."""
import json
from pathlib import Path

import pytest

from boost_cells import AutoBoost, BoostConfig, BoostTrainOneStepCell
from boost_cells.config import FEATURES, LEVELS

CONFIGS = Path(__file__).resolve().parent.parent / "configs"
OFF = dict.fromkeys(FEATURES, False)


def test_levels_match_reference_table():
    assert dict(BoostConfig.level("O0").features) == OFF
    with pytest.raises(ValueError, match="less_bn"):
        BoostConfig.level("O1")  # less_bn / grad_freeze are not implemented yet: refused, not ignored
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


def test_manual_mode_can_switch_off_level_features():
    config = BoostConfig.from_dict({"level": "O2", "boost": {"mode": "manual", "adasum": True}})
    assert dict(config.features) == {**OFF, "adasum": True}


def test_enable_all_is_refused_while_features_are_missing():
    with pytest.raises(ValueError, match="not implement"):
        BoostConfig.from_dict({"boost": {"mode": "enable_all"}})


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
    ({"boost": {"mode": "manual", "grad_accumulation": True}}, "grad_accumulation_step' must be an int >= 2"),
    ({"boost": {"mode": "manual", "grad_accumulation": "yes"}}, "'boost.grad_accumulation' must be a bool"),
    ({"loss_scale": {"type": "dyn"}}, "'loss_scale.type' must be one of 'dynamic', 'static'"),
    ({"loss_scale": {"factor": 1.0}}, "'loss_scale.factor' must be a finite number > 1"),
    ({"loss_scale": {"init": 8.0, "min_scale": 16.0, "max_scale": 4.0}}, "'loss_scale.min_scale' must be <="),
    ({"loss_scale": {"init": 8.0, "min_scale": 16.0}}, "'loss_scale.init' must be in \\[min_scale"),
    ({"loss_scale": {"init": 2.0 ** 30}}, "'loss_scale.init' must be in"),
    ({"loss_scale": {"window": 0}}, "'loss_scale.window' must be an int >= 1"),
    ({"loss_scale": {"max_scale": 1e300}}, "'loss_scale.max_scale' must be a number in \\(0, 2\\*\\*64\\]"),
    ({"dim_reduce": {"rho": 2}}, "'dim_reduce.rho' must be a number in \\(0, 1\\)"),
    ({"boost": {"adasum": True}}, "set 'boost.mode' to 'manual'"),
    ({"boost": {"mode": "manual", "dim_reduce": True}}, "feature 'dim_reduce' is switched on"),
])
def test_bad_input_names_the_key(raw, fragment):
    with pytest.raises(ValueError, match=fragment):
        BoostConfig.from_dict(raw)


def test_type_errors():
    with pytest.raises(TypeError, match="must be a dict"):
        BoostConfig.from_dict([("level", "O0")])
    with pytest.raises(TypeError, match="boost_config"):
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


def test_file_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        BoostConfig.from_file(tmp_path / "missing.json")
    bad = tmp_path / "bad.json"
    bad.write_text("{level: O0")
    with pytest.raises(ValueError, match="not valid JSON"):
        BoostConfig.from_file(bad)


@pytest.mark.parametrize("path", sorted(CONFIGS.glob("*.json")), ids=lambda p: p.name)
def test_shipped_configs_spell_out_every_key(path):
    raw = json.loads(path.read_text())
    config = BoostConfig.from_file(path)
    assert raw == config.to_dict()


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
