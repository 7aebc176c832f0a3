"""The config in force in the process (``boost_cells.config_in_force``): ``AutoBoost(level, config)`` puts one in
force and the later one holds, with a warning naming both; ``AutoBoost()`` reads it back, as the reference's train
cell and code written for it do; train cells built without ``boost_config=`` train with it."""
import warnings

import pytest
from mindspore import Tensor, nn

from boost_cells import AutoBoost, BoostConfig, BoostConfigWarning, BoostTrainOneStepCell, Model
from boost_cells.config_in_force import latest_config
from tests.helpers import accumulation, batch, linear_setup

FOUR = accumulation(4)


def boost_warnings(call):
    """``call()``'s result and the messages of the BoostConfigWarnings it gave."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = call()
    return result, [str(w.message) for w in caught if w.category is BoostConfigWarning]


def accumulation_cycle(cell):
    """How many calls of ``cell`` pass before its weights first change."""
    x, y = (Tensor(a) for a in batch())
    before = cell.weights[0].asnumpy().copy()
    for call in range(1, 9):
        cell(x, y)
        if (cell.weights[0].asnumpy() != before).any():
            return call
    return None


def test_a_bare_autoboost_reads_the_config_in_force_back_and_changes_nothing():
    """A bare AutoBoost() after AutoBoost("O0", accumulation over 4) used to put level O0 in force: a cell built
    afterwards trained without accumulation, silently. It reads the config back, as the reference's cell does with
    self.auto_boost = AutoBoost()."""
    AutoBoost("O0", FOUR)
    read_back, warned = boost_warnings(AutoBoost)
    assert warned == []
    assert read_back.config == BoostConfig.from_dict(FOUR, level="O0") == latest_config()
    assert read_back.level == "O0" and read_back.boost_config["grad_accumulation"]
    assert read_back.grad_accumulation_step == 4
    assert BoostConfig.from_dict(read_back.boost_config_dict) == read_back.config
    _, net_with_loss, opt = linear_setup()
    cell = BoostTrainOneStepCell(net_with_loss, opt)
    assert cell.max_accumulation_step == 4 and accumulation_cycle(cell) == 4


def test_a_bare_autoboost_with_nothing_in_force_is_level_o0():
    boost = AutoBoost()
    assert boost.config == BoostConfig.level("O0") and boost.level == "O0"


def test_a_later_config_holds_and_replacing_a_different_one_warns_once_naming_both():
    """The reference keeps the first AutoBoost's config, silently, when a second one names another level."""
    AutoBoost("O0", FOUR)
    _, warned = boost_warnings(lambda: AutoBoost("O0", accumulation(2)))
    assert len(warned) == 1
    assert "BoostConfig(level='O0', features=['grad_accumulation'])" in warned[0]
    assert "'grad_accumulation.grad_accumulation_step' 4 -> 2" in warned[0]
    assert AutoBoost().config.accumulation_steps == 2
    _, net_with_loss, opt = linear_setup()
    assert accumulation_cycle(BoostTrainOneStepCell(net_with_loss, opt)) == 2
    _, warned = boost_warnings(lambda: AutoBoost("O0", accumulation(2)))
    assert warned == []  # the same config again replaces nothing


def test_an_explicit_level_o0_is_put_in_force():
    """AutoBoost("O0") names a level, so it sets it: only the call with both arguments left out reads back."""
    AutoBoost("O0", FOUR)
    _, warned = boost_warnings(lambda: AutoBoost("O0"))
    assert len(warned) == 1 and "-> 'auto'" in warned[0]
    assert AutoBoost().config == BoostConfig.level("O0")


def test_a_cell_given_its_config_ignores_the_one_in_force():
    AutoBoost("O0", FOUR)
    _, net_with_loss, opt = linear_setup()
    cell = BoostTrainOneStepCell(net_with_loss, opt, boost_config={"level": "O0"})
    assert cell.max_accumulation_step == 1 and accumulation_cycle(cell) == 1


@pytest.mark.parametrize("name, section, key", [
    ("device_number", "common", "device_number"), ("grad_accumulation_step", "common", "grad_accumulation_step"),
    ("gradient_groups", "common", "gradient_split_groups"), ("rho", "dim_reduce", "rho"),
    ("gamma", "dim_reduce", "gamma"), ("alpha", "dim_reduce", "alpha"), ("sigma", "dim_reduce", "sigma"),
    ("n_components", "dim_reduce", "n_components"), ("pca_mat_path", "dim_reduce", "pca_mat_path"),
    ("weight_load_dir", "dim_reduce", "weight_load_dir"), ("timeout", "dim_reduce", "timeout")])
def test_autoboost_exposes_the_reference_settings_read_only(name, section, key):
    """The reference's AutoBoost keeps each setting of its config dict as an attribute of the same name."""
    boost = AutoBoost("O0", {"common": {"device_number": 2, "gradient_split_groups": [3]},
                             "dim_reduce": {"rho": 0.5, "n_components": 4, "timeout": 60}})
    assert getattr(boost, name) == boost.config.section(section)[key]
    with pytest.raises(AttributeError):
        setattr(boost, name, 1)


def test_local_pca_mat_path_is_none_without_dim_reduce_and_refused_with_it():
    assert AutoBoost("O0").local_pca_mat_path is None
    with pytest.warns(BoostConfigWarning, match="is replaced by"):
        boost = AutoBoost("O0", {"boost": {"mode": "manual", "dim_reduce": True}})
    with pytest.raises(ValueError, match="'local_pca_mat_path' has no value here.*pca_mat_path"):
        _ = boost.local_pca_mat_path


def test_a_model_keeps_its_config_to_itself():
    """A Model's boost config is the Model's own: a second Model with another config neither warns nor changes the
    first's, and the config in force stays as AutoBoost left it (the reference's Model puts its config in its
    singleton, so a second Model silently trained with the first one's)."""
    AutoBoost("O0", FOUR)
    models = []
    for config in (accumulation(2), accumulation(3)):
        net, _, opt = linear_setup()
        model, warned = boost_warnings(lambda: Model(net, nn.MSELoss(), opt, boost_config_dict=config))
        assert warned == []
        models.append(model)
    assert [model.boost.config.accumulation_steps for model in models] == [2, 3]
    assert AutoBoost().config == BoostConfig.from_dict(FOUR)
