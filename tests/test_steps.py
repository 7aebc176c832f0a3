"""The update-strategy contract and the step builder (``boost_cells.updates.strategy``, ``boost_cells.steps``).

Every strategy says how many optimizer updates a step applied (``step`` returns ``(loss, applied)``), and a train
step returns it with its outputs; the freezing schedule advances by it. ``build_step`` builds everything a cell runs
once: ``Model.train`` never rebuilds the train cell, so a ``FreezeOpt`` the user built keeps its groups on every
path, sink mode included."""
import inspect

import numpy as np
import mindspore as ms
import pytest
from mindspore import Tensor, nn

import boost_cells.model
from boost_cells import BoostConfig, BoostConfigWarning, FreezeOpt, Model
from boost_cells.distributed import parallel_info
from boost_cells.scaling.loss_scale import LossScale
from boost_cells.scaling.overflow import FiniteCheck
from boost_cells.steps import build_step
from boost_cells.updates import AdaSumUpdate, ApplyGradients, DimReduce, GradientAccumulation, UpdateStrategy
from tests.helpers import TanhMLP, accumulation, batch, linear_setup


def applied_counts(built, steps, inputs):
    return [int(built.train_step(*inputs)[1].asnumpy()) for _ in range(steps)]


@pytest.mark.parametrize("mode", [ms.GRAPH_MODE, ms.PYNATIVE_MODE])
def test_each_step_says_how_many_updates_it_applied(mode):
    """Plain: one update a step. Accumulation over 3 micro-steps: one every third. A loss-scaled step with an
    overflowing batch: none, and the scale halves."""
    ms.set_context(mode=mode, device_target="CPU")
    inputs = tuple(Tensor(a) for a in batch())
    _, net_with_loss, opt = linear_setup()
    plain = build_step(net_with_loss, opt, BoostConfig.level("O0"), parallel_info(), who="test")
    assert applied_counts(plain, 2, inputs) == [1, 1]
    _, net_with_loss, opt = linear_setup()
    accumulating = build_step(net_with_loss, opt, BoostConfig.from_dict(accumulation(3)), parallel_info(), who="test")
    assert applied_counts(accumulating, 6, inputs) == [0, 0, 1, 0, 0, 1]
    assert int(accumulating.update.accumulation_step.asnumpy()) == 0

    _, net_with_loss, opt = linear_setup()
    scaled = build_step(net_with_loss, opt, BoostConfig.level("O0"), parallel_info(), who="test",
                        loss_scale=LossScale(Tensor(np.float32(2.0 ** 10))), overflow_detector=FiniteCheck())
    x, y = batch()
    x[0, 0] = np.inf
    (_, overflow, _), applied = scaled.train_step(Tensor(x), Tensor(y))
    assert bool(overflow.asnumpy()) and int(applied.asnumpy()) == 0
    (_, overflow, _), applied = scaled.train_step(*inputs)
    assert not bool(overflow.asnumpy()) and int(applied.asnumpy()) == 1


def test_suffix_strategies_share_the_full_strategys_state():
    """``for_suffix`` gives a strategy over a suffix optimizer's weights that uses the full one's buffers and
    counter, without any caller looking them up."""
    net = TanhMLP()
    params = net.trainable_params()
    opt = FreezeOpt(nn.Momentum(params, 0.1, 0.9), [params, params[4:], params[8:]])
    built = build_step(nn.WithLossCell(net, nn.MSELoss()), opt, BoostConfig.from_dict(accumulation(2)),
                       parallel_info(), who="test")
    suffix = built.train_step.steps[2].update
    assert suffix.accumulation_step is built.update.accumulation_step
    assert [id(b) for b in suffix.grad_sums] == [id(b) for b in built.update.grad_sums[8:]]


def test_model_train_keeps_a_user_freeze_opt_and_its_groups_in_sink_mode(graph_mode, monkeypatch):
    """A FreezeOpt the user built (two groups of their choosing) trains through Model in (stand-in) sink mode on GPU
    without a rebuild: the train cell and its optimizer stay, with the user's groups and strategy, and the cache's
    route steps aside with one warning. Stand-in: the device target boost_cells reads is patched to "GPU"
    (MindSpore itself, seeing CPU, trains in non-sink mode)."""
    ms.set_seed(0)
    net = nn.SequentialCell([nn.Dense(4, 8), nn.Tanh(), nn.Dense(8, 8), nn.Tanh(), nn.Dense(8, 3)])
    params = net.trainable_params()
    user = FreezeOpt(nn.Momentum(params, 0.05, 0.9), [params, params[2:]], [0, 1, 1], cyclic=False)
    config = {"grad_freeze": {"cache_frozen_prefix": True}}
    model = Model(net, nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean"), user,
                  boost_config_dict=config)
    built = model.train_network
    assert built.optimizer is user and built.level_route is not None
    monkeypatch.setattr(boost_cells.model, "device_target", lambda: "GPU")
    rng = np.random.RandomState(0)
    data = ms.dataset.NumpySlicesDataset({"x": rng.randn(32, 4).astype(np.float32),
                                          "y": rng.randint(0, 3, 32).astype(np.int32)}, shuffle=False).batch(8)
    with pytest.warns(BoostConfigWarning, match="left out in dataset sink mode on GPU"):
        model.train(1, data, dataset_sink_mode=True)
    assert model.train_network is built and built.optimizer is user and not built.level_route.active
    assert [len(o.parameters) for o in user.opts] == [6, 4] and built.freeze_plan.sequence == (0, 1, 1)
    assert built.train_step.current_index() == 1


def test_every_update_strategy_keeps_the_whole_contract():
    """``step_reduced`` and ``for_suffix`` are every strategy's own (DimReduce left both to the base's
    NotImplementedError), ``step_reduced`` takes the step's inputs as ``step`` does (DimReduce's line search runs the
    network on them), and ``adasum_part`` names the part that combines the ranks' updates, so the step builder asks
    the strategy instead of checking its class."""
    for cls in (ApplyGradients, GradientAccumulation, AdaSumUpdate, DimReduce):
        assert cls.step_reduced is not UpdateStrategy.step_reduced and cls.for_suffix is not UpdateStrategy.for_suffix
        assert list(inspect.signature(cls.step_reduced).parameters) == ["self", "loss", "grads", "inputs"]
    _, _, opt = linear_setup()
    assert ApplyGradients(opt).adasum_part() is None and GradientAccumulation(2, opt).adasum_part() is None
    assert AdaSumUpdate.adasum_part is not UpdateStrategy.adasum_part
