"""One way in: a config's network and optimizer transforms (LessBN with its head and gradient
centralization, freezing's groups) take effect, or are refused with a message that says where they apply, on every
entry point that takes a config: ``Model``, ``build_train_network``, a train cell's ``boost_config=``, and (the
reference's way) the latest ``AutoBoost``. Each shipped config is tried on each, and so are the bare levels O1 and
O2 (no file), which switch LessBN on where the shipped files leave it off."""
import warnings
from pathlib import Path

import pytest
from mindspore import nn

from boost_cells import (AutoBoost, BoostConfig, BoostConfigWarning, BoostTrainOneStepCell,
                         BoostTrainOneStepWithLossScaleCell, CommonHeadLastFN, FreezeOpt, LessBN, Model,
                         build_train_network)
from boost_cells.freezing import freeze_optimizer
from boost_cells.scaling.loss_scale import policy_from_config

CONFIGS_DIR = Path(__file__).resolve().parent.parent / "configs"
# Each shipped file by name, and the bare levels as "level O1" / "level O2".
CONFIGS = sorted(path.name for path in CONFIGS_DIR.glob("*.json")) + ["level O1", "level O2"]


def loss():
    """A fresh loss cell (LessBN flags every cell under it, a shared loss included)."""
    return nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")


def network():
    """Eight Dense layers: every shipped config's freezing can split it, with or without LessBN (the reference's
    layering pairs Dense layers: 4 layers, more than O1.json's 3 groups, and LessBN's head adds one)."""
    return nn.SequentialCell([nn.Dense(16, 32, activation="relu")]
                             + [nn.Dense(32, 32, activation="relu") for _ in range(6)] + [nn.Dense(32, 2)])


def transforms(cell):
    """What the train cell trains with: (under LessBN, its head feature-normalised, its optimizer centralizing,
    its freezing groups)."""
    optimizer = cell.optimizer.optimizer if isinstance(cell.optimizer, FreezeOpt) else cell.optimizer
    heads = [c for _, c in cell.network.cells_and_names() if isinstance(c, CommonHeadLastFN)]
    groups = cell.optimizer.groups_num if isinstance(cell.optimizer, FreezeOpt) else 1
    return (any(isinstance(c, LessBN) for _, c in cell.network.cells_and_names()), bool(heads),
            any(getattr(optimizer, "grad_centralization_flags", ()) or ()), groups)


def quietly(build):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", BoostConfigWarning)
        return build()


def config_of(name):
    """``(BoostConfig, boost_config_dict)`` of a ``CONFIGS`` entry: a shipped file and its path, or a bare level and
    "" (what ``Model`` and ``AutoBoost`` take for no file)."""
    if name.startswith("level "):
        return BoostConfig.level(name.split()[1]), ""
    return BoostConfig.from_file(CONFIGS_DIR / name), str(CONFIGS_DIR / name)


def expected(config):
    on = config.enabled("less_bn")
    section = config.section("less_bn")
    net = quietly(lambda: LessBN(network(), fn_flag=section["fn_flag"]) if on else network())
    optimizer = nn.Momentum(net.trainable_params(), 0.05, 0.9)
    frozen = quietly(lambda: freeze_optimizer(config, nn.WithLossCell(net, loss()), optimizer))
    return (on, on and section["fn_flag"], on and section["gc_flag"],
            frozen.groups_num if isinstance(frozen, FreezeOpt) else 1)


@pytest.mark.parametrize("name", CONFIGS)
def test_model_and_build_train_network_apply_the_same_transforms(name):
    config, config_dict = config_of(name)
    net = network()
    model = quietly(lambda: Model(net, loss(), nn.Momentum(net.trainable_params(), 0.05, 0.9),
                                  boost_level=config.level_name, boost_config_dict=config_dict))
    net = network()
    built = quietly(lambda: build_train_network(nn.WithLossCell(net, loss()),
                                                nn.Momentum(net.trainable_params(), 0.05, 0.9), config))
    assert transforms(model.train_network) == transforms(built) == expected(config)


@pytest.mark.parametrize("name", CONFIGS)
def test_a_train_cell_applies_the_config_or_refuses_naming_where_it_applies(name):
    """A train cell trains the network and optimizer it is given: freezing's groups apply; LessBN, which rebuilds
    both, is refused for a config given to the cell (naming build_train_network, Model and AutoBoost), and warned
    about for the latest AutoBoost's (the reference's cells train without it too)."""
    config, config_dict = config_of(name)
    net = network()

    def make():
        parts = (nn.WithLossCell(net, loss()), nn.Momentum(net.trainable_params(), 0.05, 0.9))
        if config.loss_scale is None:
            return BoostTrainOneStepCell(*parts, boost_config=config)
        return BoostTrainOneStepWithLossScaleCell(*parts, policy_from_config(config.loss_scale), boost_config=config)

    if config.enabled("less_bn"):
        with pytest.raises(ValueError, match="'less_bn' is on, but the network is not under LessBN.*"
                                             "build_train_network.*boost_cells.Model.*network_auto_process_train"):
            make()
        quietly(lambda: AutoBoost(config.level_name, config_dict))
        with pytest.warns(BoostConfigWarning, match="This cell trains without it, as mindspore.boost's does"):
            BoostTrainOneStepCell(nn.WithLossCell(net, loss()), nn.Momentum(net.trainable_params(), 0.05, 0.9))
        return
    assert transforms(quietly(make)) == expected(config)
