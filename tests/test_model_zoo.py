"""The model zoo's O1 calls, as MindSpore runs them with mindspore.boost: ResNet's grouped optimizer
(``init_group_params``: weight decay on conv/dense weights only, and an ``order_params`` group) under gradient
freezing; a network without a Dense head (conv only, its loss computed inside, as CycMuNet); a ready train cell
given to ``Model`` with no loss and no optimizer (acn_mindspore)."""
import warnings

import numpy as np
import mindspore as ms
import mindspore.dataset as ds
import pytest
from mindspore import Tensor, nn, ops
from mindspore.train import FixedLossScaleManager

from boost_cells import (AutoBoost, BoostConfigWarning, BoostTrainOneStepCell, FreezeOpt, LessBN, Model,
                         build_train_network)
from boost_cells.transforms import OptimizerProcess
from tests.helpers import TanhMLP, batch, freeze_config, numpy_mlp_grads

LR, MOMENTUM, DECAY = 0.1, 0.9, 0.05


def init_group_params(net, weight_decay=DECAY):
    """The model zoo's ResNet optimizer groups (``train.py``): weight decay on every parameter but BatchNorm
    gamma/beta and biases, none on those, and the network order as ``order_params``."""
    decayed, no_decayed = [], []
    for param in net.trainable_params():
        if "beta" not in param.name and "gamma" not in param.name and "bias" not in param.name:
            decayed.append(param)
        else:
            no_decayed.append(param)
    return [{"params": decayed, "weight_decay": weight_decay}, {"params": no_decayed},
            {"order_params": net.trainable_params()}]


def order_group(optimizer):
    """The ``order_params`` list an optimizer was built with."""
    return [group["order_params"] for group in optimizer.init_params["params"] if "order_params" in group][0]


def numpy_grouped_run(start, batches, indices, decayed):
    """MindSpore's Momentum with per-parameter weight decay, in float64: on step t, parameters from freezing group
    ``indices[t]`` on (TanhMLP: 4 parameters per group) take ``g + decay * w`` (decay only where ``decayed``),
    ``v = m v + g`` and ``w -= lr v``; the others and their velocity stay."""
    params = [p.asnumpy().astype(np.float64) for p in start.trainable_params()]
    velocity = [np.zeros_like(p) for p in params]
    for (x, y), index in zip(batches, indices):
        grads = numpy_mlp_grads(params, x.asnumpy().astype(np.float64), y.asnumpy().astype(np.float64))
        for j in range(4 * index, len(params)):
            grad = grads[j] + (DECAY * params[j] if decayed[j] else 0.0)
            velocity[j] = MOMENTUM * velocity[j] + grad
            params[j] = params[j] - LR * velocity[j]
    return params


# ---------------------------------------------------------------- ResNet's grouped optimizer


def test_grouped_optimizer_with_order_params_freezes(mode):
    """The zoo's grouped Momentum freezes (it was refused): every suffix optimizer keeps the groups' options and an
    ``order_params`` listing exactly its parameters in network order; each step (full or frozen) matches NumPy
    Momentum with weight decay on the weights only; the checkpoint holds the names a plain train cell holds, plus
    the schedule position."""
    net = TanhMLP()
    names = [p.name for p in net.trainable_params()]
    optimizer = nn.Momentum(init_group_params(net), LR, MOMENTUM)
    cell = build_train_network(nn.WithLossCell(net, nn.MSELoss()), optimizer, freeze_config(3, 0, 0.5, 10))
    assert isinstance(cell.optimizer, FreezeOpt) and cell.optimizer.optimizer is optimizer
    for suffix, start in zip(cell.optimizer.opts, (0, 4, 8)):
        assert [p.name for p in suffix.parameters] == names[start:]
        assert [p.name for p in order_group(suffix)] == names[start:]
        assert list(suffix.weight_decay) == [DECAY if "weight" in name else 0.0 for name in names[start:]]
        assert suffix.moments[0] is optimizer.moments[start] and suffix.learning_rate is optimizer.learning_rate

    batches = [tuple(Tensor(a) for a in batch(n=8, seed=step, n_in=4, n_out=3)) for step in range(6)]
    indices = []
    for inputs in batches:
        indices.append(cell.train_step.current_index())
        cell(*inputs)
    assert indices == [0, 0, 1, 2, 0, 0]  # the continuous schedule, z = 2
    decayed = ["weight" in name for name in names]
    expected = numpy_grouped_run(TanhMLP(), batches, indices, decayed)
    for param, want in zip(net.trainable_params(), expected):
        np.testing.assert_allclose(param.asnumpy(), want, rtol=2e-5, atol=2e-6, err_msg=param.name)
    # The check can tell: decaying the biases too gives other weights.
    everywhere = numpy_grouped_run(TanhMLP(), batches, indices, [True] * len(names))
    assert not all(np.allclose(p.asnumpy(), w, rtol=2e-5, atol=2e-6)
                   for p, w in zip(net.trainable_params(), everywhere))

    plain_net = TanhMLP()
    plain = nn.TrainOneStepCell(nn.WithLossCell(plain_net, nn.MSELoss()),
                                nn.Momentum(init_group_params(plain_net), LR, MOMENTUM))
    ours = [p.name for p in cell.get_parameters()]
    assert len(ours) == len(set(ours))
    assert set(ours) == {p.name for p in plain.get_parameters()} | {"grad_freeze.position"}


def test_grouped_optimizer_through_less_bn_at_o1(graph_mode):
    """The zoo's whole O1 call: ``Model(net, loss, Momentum(init_group_params(net), ..., loss_scale),
    loss_scale_manager=FixedLossScaleManager(..., False), metrics, boost_level="O1")``. LessBN's rebuilt optimizer
    (``OptimizerProcess``/``ParameterProcess``) keeps the ``order_params`` group over the transformed network, with
    the feature-normalised head; freezing splits it, each suffix keeping per parameter the original's weight decay
    and centralization flag and an exact ``order_params``; training runs frozen and full steps and evaluates."""
    net = ConvNet()
    loss = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")
    optimizer = nn.Momentum(init_group_params(net), 0.05, MOMENTUM, loss_scale=64.0)
    config = {"grad_freeze": {"param_groups": 2, "freeze_type": 0, "freeze_p": 0.5}}
    with warnings.catch_warnings(record=True) as records:
        warnings.simplefilter("always")
        model = Model(net, loss, optimizer, metrics={"acc"}, boost_level="O1", boost_config_dict=config,
                      loss_scale_manager=FixedLossScaleManager(64.0, drop_overflow_update=False))
    assert not records, [str(r.message) for r in records]  # the frozen optimizer's loss_scale is its optimizer's
    cell = model.train_network
    base = cell.optimizer.optimizer
    assert isinstance(cell.optimizer, FreezeOpt) and isinstance(cell.network._backbone, LessBN)
    network_order = [p.name for p in cell.network.trainable_params()]
    assert "fc.multiplier" in network_order and "fc.bias" not in network_order
    assert [p.name for p in base.parameters] == [p.name for p in order_group(base)] == network_order
    position = {id(p): i for i, p in enumerate(base.parameters)}
    assert any(base.grad_centralization_flags)
    for suffix in cell.optimizer.opts:
        assert [p.name for p in order_group(suffix)] == [p.name for p in suffix.parameters]
        assert [p.name for p in suffix.parameters] == network_order[-len(suffix.parameters):]
        for attribute in ("weight_decay", "grad_centralization_flags"):
            assert tuple(getattr(suffix, attribute)) == tuple(getattr(base, attribute)[position[id(p)]]
                                                              for p in suffix.parameters), attribute
    decay = {name: float(value) for name, value in zip(network_order, base.weight_decay)}
    # MindSpore keeps weight decay multiplied by the optimizer's loss_scale (the gradients it meets are scaled)
    assert decay["conv1.weight"] == decay["fc.weight"] == pytest.approx(DECAY * 64.0)
    assert decay["bn1.gamma"] == decay["bn3.beta"] == 0.0

    x, y = digits_like()
    data = ds.NumpySlicesDataset({"x": x, "y": y}, shuffle=False).batch(8)
    before = {p.name: p.asnumpy().copy() for p in net.trainable_params()}
    model.train(1, data, dataset_sink_mode=False)
    assert int(base.global_step.asnumpy()[0]) == 4 and int(cell.train_step.schedule.position.asnumpy()) == 4
    assert cell.optimizer.strategy[:4] == (0, 1, 0, 1)  # full and frozen steps alternate
    assert all(not np.array_equal(before[p.name], p.asnumpy()) for p in net.trainable_params())
    assert 0.0 <= model.eval(data, dataset_sink_mode=False)["acc"] <= 1.0


class ConvNet(nn.Cell):
    """Three conv-BatchNorm-ReLU layers and a Dense head on 1x8x8 images (conv2, conv3 and fc centralized)."""

    def __init__(self):
        super().__init__()
        ms.set_seed(0)
        self.conv1 = nn.Conv2d(1, 16, 3, weight_init="HeUniform")
        self.bn1 = nn.BatchNorm2d(16)
        self.conv2 = nn.Conv2d(16, 16, 3, stride=2, weight_init="HeUniform")
        self.bn2 = nn.BatchNorm2d(16)
        self.conv3 = nn.Conv2d(16, 16, 3, stride=2, weight_init="HeUniform")
        self.bn3 = nn.BatchNorm2d(16)
        self.relu = nn.ReLU()
        self.flatten = nn.Flatten()
        self.fc = nn.Dense(64, 10, weight_init="HeUniform")

    def construct(self, x):
        x = self.relu(self.bn1(self.conv1(x)))
        x = self.relu(self.bn2(self.conv2(x)))
        return self.fc(self.flatten(self.relu(self.bn3(self.conv3(x)))))


def digits_like(n=32, seed=0):
    rng = np.random.RandomState(seed)
    return rng.rand(n, 1, 8, 8).astype(np.float32), rng.randint(0, 10, n).astype(np.int32)


# ---------------------------------------------------------------- a network without a Dense head


class SuperResolution(nn.Cell):
    """A conv-only network that computes its loss itself, as CycMuNet's: ``(low, high) -> mean |net(low) - high|``;
    ``predict(low)`` is the network alone. No nn.Dense anywhere."""

    def __init__(self):
        super().__init__()
        ms.set_seed(0)
        self.head = nn.Conv2d(1, 16, 3, weight_init="HeUniform", has_bias=True)
        self.body = nn.Conv2d(16, 16, 3, weight_init="HeUniform", has_bias=True)
        self.tail = nn.Conv2d(16, 1, 3, weight_init="HeUniform", has_bias=True)
        self.relu = nn.ReLU()

    def predict(self, low):
        return self.tail(self.relu(self.body(self.relu(self.head(low))))) + low

    def construct(self, low, high):
        return ops.mean(ops.abs(self.predict(low) - high))


class SuperResolutionEval(nn.Cell):
    """The eval network: ``(low, high) -> (prediction, high)`` for an error metric."""

    def __init__(self, network):
        super().__init__(auto_prefix=False)
        self.network = network

    def construct(self, low, high):
        return self.network.predict(low), high


def video_frames(n=16, seed=0):
    rng = np.random.RandomState(seed)
    high = rng.rand(n, 1, 8, 8).astype(np.float32)
    return (high + 0.1 * rng.randn(*high.shape)).astype(np.float32), high


def test_network_without_dense_trains_at_o1(graph_mode):
    """``Model(net_with_loss, optimizer=..., eval_network=..., boost_level="O1")`` on a conv-only network: one
    BoostConfigWarning (at the user's line) that the feature-normalised head was not applied; the rest of O1 still
    applies (LessBN's pass, gradient centralization, freezing) and the model trains and evaluates."""
    net = SuperResolution()
    optimizer = nn.Adam(net.trainable_params(), 1e-3)
    config = {"grad_freeze": {"param_groups": 2, "freeze_type": 0, "freeze_p": 0.5}}
    with warnings.catch_warnings(record=True) as records:
        warnings.simplefilter("always")
        model = Model(net, optimizer=optimizer, metrics={"mae": nn.MAE()}, eval_network=SuperResolutionEval(net),
                      boost_level="O1", boost_config_dict=config)
    ours = [r for r in records if issubclass(r.category, BoostConfigWarning)]
    assert len(ours) == 1 and "feature-normalised head" in str(ours[0].message), [str(r.message) for r in records]
    assert ours[0].filename == __file__
    cell = model.train_network
    assert isinstance(cell, BoostTrainOneStepCell) and isinstance(cell.network, LessBN)
    assert isinstance(cell.optimizer, FreezeOpt) and [len(o.parameters) for o in cell.optimizer.opts] == [6, 2]
    flags = dict(zip((p.name for p in cell.optimizer.optimizer.parameters),
                     cell.optimizer.optimizer.grad_centralization_flags))
    assert flags == {"head.weight": True, "head.bias": False, "body.weight": True, "body.bias": False,
                     "tail.weight": True, "tail.bias": False}  # applied only where shape[1] % 16 == 0: body, tail

    low, high = video_frames()
    data = ds.NumpySlicesDataset({"low": low, "high": high}, shuffle=False).batch(4)
    start = model.eval(data, dataset_sink_mode=False)["mae"]
    with warnings.catch_warnings(record=True) as records:
        warnings.simplefilter("always")
        model.train(3, data, dataset_sink_mode=False)
    assert not [r for r in records if issubclass(r.category, BoostConfigWarning)]
    assert int(cell.optimizer.optimizer.global_step.asnumpy()[0]) == 12
    assert model.eval(data, dataset_sink_mode=False)["mae"] < start


def test_no_dense_warns_once_per_auto_boost():
    """The train and eval transforms of one AutoBoost warn once between them; LessBN asked for the head
    explicitly still refuses a network without a Dense (``test_less_bn``)."""
    ms.set_context(mode=ms.PYNATIVE_MODE, device_target="CPU")
    boost = AutoBoost("O1", {"boost": {"mode": "manual", "grad_freeze": False}})
    net = SuperResolution()
    with warnings.catch_warnings(record=True) as records:
        warnings.simplefilter("always")
        network, optimizer = boost.network_auto_process_train(net, nn.SGD(net.trainable_params(), 0.1))
        evaluated = boost.network_auto_process_eval(SuperResolutionEval(SuperResolution()))
    assert [r.category for r in records] == [BoostConfigWarning] and records[0].filename == __file__
    assert isinstance(network, LessBN) and isinstance(evaluated, LessBN)
    assert network.network is net and any(optimizer.grad_centralization_flags)
    for config_dict, warned in (("", 1), ({"less_bn": {"fn_flag": False}}, 0)):  # a new AutoBoost warns again
        boost = AutoBoost("O1", config_dict)  # it replaces the config in force, with a warning of its own
        with warnings.catch_warnings(record=True) as records:
            warnings.simplefilter("always")
            boost.network_auto_process_eval(SuperResolution())
        assert len(records) == warned


# ---------------------------------------------------------------- a ready train cell


def user_train_cell():
    net = TanhMLP()
    return net, nn.TrainOneStepCell(nn.WithLossCell(net, nn.MSELoss()), nn.Momentum(net.trainable_params(), LR,
                                                                                     MOMENTUM))


def test_ready_train_cell_trains_as_by_hand(mode):
    """``Model(train_cell, boost_level="O1")`` (acn_mindspore's call) warns once, naming the features it does not
    apply, and ``model.train`` steps the user's cell exactly as calling it by hand on the same batches does."""
    batches = [batch(n=8, seed=step, n_in=4, n_out=3) for step in range(4)]
    by_hand_net, by_hand = user_train_cell()
    by_hand.set_train()
    for _ in range(2):
        for x, y in batches:
            by_hand(Tensor(x), Tensor(y))

    net, cell = user_train_cell()
    with warnings.catch_warnings(record=True) as records:
        warnings.simplefilter("always")
        model = Model(cell, boost_level="O1")
    assert [r.category for r in records] == [BoostConfigWarning] and records[0].filename == __file__
    message = str(records[0].message)
    assert "'less_bn', 'grad_freeze'" in message and "ready train cell" in message
    assert model.train_network is cell
    data = ds.NumpySlicesDataset({"x": np.concatenate([x for x, _ in batches]),
                                  "y": np.concatenate([y for _, y in batches])}, shuffle=False).batch(8)
    model.train(2, data, dataset_sink_mode=False)
    for got, want in zip(net.trainable_params(), by_hand_net.trainable_params()):
        np.testing.assert_array_equal(got.asnumpy(), want.asnumpy(), err_msg=got.name)
    assert not np.array_equal(net.trainable_params()[0].asnumpy(), TanhMLP().trainable_params()[0].asnumpy())


def test_ready_train_cell_without_features_is_silent_and_loss_without_optimizer_refused():
    """Level O0 (nothing to leave out) gives no warning; a loss without an optimizer is still refused."""
    ms.set_context(mode=ms.PYNATIVE_MODE, device_target="CPU")
    _, cell = user_train_cell()
    with warnings.catch_warnings(record=True) as records:
        warnings.simplefilter("always")
        Model(cell, boost_level="O0")
    assert not [r for r in records if issubclass(r.category, BoostConfigWarning)]
    with pytest.raises(ValueError, match="'optimizer' is None"):
        Model(TanhMLP(), nn.MSELoss(), boost_level="O1")


def test_optimizer_process_keeps_order_params_and_kwargs():
    """OptimizerProcess over a zoo grouped optimizer keeps its order_params group (as the reference's does), so the
    rebuilt optimizer orders its parameters as the network does; an optimizer whose constructor takes **kwargs
    (Adam, as CycMuNet trains with) is rebuilt with the same arguments."""
    net = ConvNet()
    process = OptimizerProcess(nn.Momentum(init_group_params(net), 0.05, MOMENTUM))
    process.add_grad_centralization(net)
    rebuilt = process.generate_new_optimizer()
    assert [p.name for p in rebuilt.parameters] == [p.name for p in net.trainable_params()]
    adam = OptimizerProcess(nn.Adam(net.trainable_params(), 1e-3, beta1=0.8, use_lazy=False)).generate_new_optimizer()
    assert isinstance(adam, nn.Adam) and adam.init_args["beta1"] == 0.8
