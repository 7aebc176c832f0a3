"""boost_cells.Model: the boost level builds boost_cells' train cell, with or without metrics; amp_level and
loss_scale_manager honoured as mindspore.train.Model honours them; callbacks, checkpoints and eval work."""
import numpy as np
import mindspore as ms
import mindspore.dataset as ds
import pytest
from mindspore import Tensor, nn
from mindspore.train import Callback, LossMonitor, TimeMonitor
from mindspore.train.callback import CheckpointConfig, ModelCheckpoint

from boost_cells import (AutoBoost, BoostConfig, BoostTrainOneStepCell, BoostTrainOneStepWithLossScaleCell,
                         CommonHeadLastFN, Model, build_train_network)
from tests.helpers import Linear, weights_of
from tests.launch import ROOT

STEPS, BATCH = 4, 8


def classification_data(seed=0):
    """STEPS batches of 4 features -> 3 classes, linearly separable enough to learn in a few steps."""
    rng = np.random.RandomState(seed)
    x = rng.randn(STEPS * BATCH, 4).astype(np.float32)
    y = (x[:, 0] > 0).astype(np.int32) + (x[:, 1] > 1).astype(np.int32)
    return x, y


def dataset(x, y):
    return ds.NumpySlicesDataset({"x": x, "y": y}, shuffle=False).batch(BATCH)


def setup(lr=0.1, **opt_kwargs):
    net = Linear(4, 3)
    loss = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")
    return net, loss, nn.Momentum(net.trainable_params(), lr, 0.9, **opt_kwargs)


def control_weights(x, y, epochs, sens=1.0, **opt_kwargs):
    """The weights after the same steps with MindSpore's own nn.TrainOneStepCell."""
    net, loss, opt = setup(**opt_kwargs)
    cell = nn.TrainOneStepCell(nn.WithLossCell(net, loss), opt, sens=sens)
    for _ in range(epochs):
        for start in range(0, len(x), BATCH):
            cell(Tensor(x[start:start + BATCH]), Tensor(y[start:start + BATCH]))
    return weights_of(net)


class Outputs(Callback):
    """Records each step's network outputs, as LossMonitor reads them."""

    def __init__(self):
        super().__init__()
        self.outputs = []

    def on_train_step_end(self, run_context):
        self.outputs.append(run_context.original_args().net_outputs)


def assert_weights_equal(actual, expected):
    assert actual.keys() == expected.keys()
    for name in expected:
        np.testing.assert_array_equal(actual[name], expected[name], err_msg=name)


def test_model_without_metrics_trains_boost_cell_and_reports_loss(mode):
    """mindspore.train.Model drops the boost level without metrics and reports None; ours builds the config's
    train cell, returns the loss to callbacks, and trains exactly like nn.TrainOneStepCell on O0."""
    x, y = classification_data()
    net, loss, opt = setup()
    model = Model(net, loss, opt, boost_config_dict="configs/O0.json")
    assert isinstance(model.train_network, BoostTrainOneStepCell)
    record = Outputs()
    model.train(2, dataset(x, y), callbacks=[record], dataset_sink_mode=False)
    assert len(record.outputs) == 2 * STEPS
    assert all(isinstance(out, Tensor) and out.shape == () for out in record.outputs)
    assert_weights_equal(weights_of(net), control_weights(x, y, epochs=2))


def test_model_callbacks_checkpoint_and_eval(graph_mode, tmp_path):
    """LossMonitor, TimeMonitor and ModelCheckpoint run; the checkpoint loads strictly into a plain network; eval
    reports the accuracy NumPy computes from the trained weights."""
    x, y = classification_data()
    net, loss, opt = setup()
    model = Model(net, loss, opt, metrics={"acc"}, boost_level="O0")
    checkpoint = ModelCheckpoint("model", str(tmp_path), CheckpointConfig(save_checkpoint_steps=STEPS))
    model.train(3, dataset(x, y), callbacks=[LossMonitor(), TimeMonitor(), checkpoint], dataset_sink_mode=False)
    saved = sorted(tmp_path.glob("model*.ckpt"))
    assert saved
    plain = Linear(4, 3)
    not_loaded, _ = ms.load_param_into_net(plain, ms.load_checkpoint(str(saved[-1])), strict_load=True)
    assert not_loaded == []
    assert_weights_equal(weights_of(plain), weights_of(net))
    w = weights_of(net)
    expected = float(((x @ w["fc.weight"].T + w["fc.bias"]).argmax(axis=1) == y).mean())
    assert model.eval(dataset(x, y), dataset_sink_mode=False)["acc"] == pytest.approx(expected)


def test_model_loss_scale_managers(graph_mode):
    """A dynamic manager gives the loss-scaled cell (which runs on CPU, unlike MindSpore's) and Model's host-side
    manager follows its overflow flag; FixedLossScaleManager(drop_overflow_update=False) scales the backward pass
    by sens, divided out by the optimizer's loss_scale, as nn.TrainOneStepCell does."""
    x, y = classification_data()
    net, loss, opt = setup()
    manager = ms.amp.DynamicLossScaleManager(init_loss_scale=2.0 ** 10, scale_factor=2, scale_window=3)
    model = Model(net, loss, opt, loss_scale_manager=manager)
    assert isinstance(model.train_network, BoostTrainOneStepWithLossScaleCell)
    record = Outputs()
    model.train(1, dataset(x, y), callbacks=[record], dataset_sink_mode=False)
    assert [bool(out[1].asnumpy()) for out in record.outputs] == [False] * STEPS
    assert float(record.outputs[-1][2].asnumpy()) == 2.0 ** 11
    assert_weights_equal(weights_of(net), control_weights(x, y, epochs=1))

    net, loss, opt = setup(loss_scale=64.0)
    model = Model(net, loss, opt, loss_scale_manager=ms.amp.FixedLossScaleManager(64.0, drop_overflow_update=False))
    assert type(model.train_network) is BoostTrainOneStepCell
    model.train(1, dataset(x, y), dataset_sink_mode=False)
    expected = control_weights(x, y, epochs=1, sens=64.0, loss_scale=64.0)
    assert_weights_equal(weights_of(net), expected)


def test_model_amp_level_o2_casts_and_scales(graph_mode):
    """amp_level 'O2' casts the network to float16 with a dynamic loss scale, as mindspore.amp does; MindSpore
    refuses that on CPU, ours trains."""
    x, y = classification_data()
    net, loss, opt = setup()
    model = Model(net, loss, opt, amp_level="O2")
    assert isinstance(model.train_network, BoostTrainOneStepWithLossScaleCell)
    before = weights_of(net)
    record = Outputs()
    model.train(4, dataset(x, y), callbacks=[record], dataset_sink_mode=False)
    # The first step overflows at the default 2**24: a float16 backward pass does, a float32 one would not.
    assert bool(record.outputs[0][1].asnumpy()) and float(record.outputs[0][2].asnumpy()) == 2.0 ** 23
    losses = [float(out[0].asnumpy()) for out in record.outputs]
    assert np.isfinite(losses).all() and losses[-1] < losses[0]
    assert any((before[name] != value).any() for name, value in weights_of(net).items())
    assert net.fc.weight.dtype == ms.float32


def test_model_takes_a_shipped_config_by_name(tmp_path, monkeypatch):
    """``boost_config_dict="grad_accumulation"`` is the shipped file from any directory, as its path is
    from the repository's root; an unknown name is an error naming the argument; "" stays the level's defaults."""
    monkeypatch.chdir(tmp_path)
    net, loss, opt = setup()
    model = Model(net, loss, opt, boost_config_dict="grad_accumulation")
    assert model.boost.config == BoostConfig.from_file(ROOT / "configs" / "grad_accumulation.json")
    assert model.train_network.use_grad_accumulation
    with pytest.raises(FileNotFoundError, match="'boost_config_dict': config file 'O9' does not exist"):
        Model(net, loss, opt, boost_config_dict="O9")
    assert Model(net, loss, opt, boost_config_dict="").boost.config == BoostConfig.level("O0")


def test_model_errors():
    net, loss, opt = setup()
    with pytest.raises(ValueError, match="'optimizer' is None"):
        Model(net, loss, None, boost_config_dict={"boost": {"mode": "manual", "adasum": True}})
    with pytest.raises(ValueError, match="disagrees"):
        Model(net, loss, opt, boost_level="O0", boost_config_dict={"level": "O1"})
    with pytest.raises(ValueError, match="level"):
        Model(net, loss, opt, boost_level="O3")
    with pytest.raises(ValueError, match="kwargs"):
        Model(net, loss, opt, boost_config={"level": "O0"})
    predict_only = Model(net)
    assert predict_only.predict(Tensor(np.ones((2, 4), np.float32))).shape == (2, 3)


# Levels O1 and O2 on a network with BatchNorm: 3 layers for freezing (conv+BN, conv+BN, dense), so 2 groups;
# the continuous schedule at freeze_p 0.5 alternates a full step (index 0) and a step that trains group 1 only.
FREEZE = {"param_groups": 2, "freeze_type": 0, "freeze_p": 0.5, "total_steps": 16}


def bn_net(seed=0):
    ms.set_seed(seed)
    return nn.SequentialCell([nn.Conv2d(1, 4, 3), nn.BatchNorm2d(4), nn.ReLU(),
                              nn.Conv2d(4, 16, 3), nn.BatchNorm2d(16), nn.ReLU(),
                              nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Dense(16, 3)])


def image_data(seed=0):
    rng = np.random.RandomState(seed)
    x = rng.rand(STEPS * BATCH, 1, 6, 6).astype(np.float32)
    return x, (x[:, 0, :3].mean(axis=(1, 2)) > 0.5).astype(np.int32) + (x[:, 0, 3:].mean(axis=(1, 2)) > 0.5)


class FirstLayer(Callback):
    """The first conv's weight after each step."""

    def __init__(self, net):
        super().__init__()
        self.net, self.weights = net, []

    def on_train_step_end(self, run_context):
        self.weights.append(self.net[0].weight.asnumpy().copy())


@pytest.mark.parametrize("level", ["O1", "O2"])
def test_levels_through_model_equal_autoboost_and_build_train_network(mode, level):
    """Model(boost_level=O1/O2) without metrics (MindSpore's trains plain O0 there) equals the documented manual
    route, AutoBoost's transforms then build_train_network, to the bit; the loss reaches the callbacks; LessBN's
    head replaced the Dense without renaming anything else; the first group trains on full steps only. Stand-alone,
    O2's AdaSum has one group, so O2 equals O1."""
    config = {"level": level, "grad_freeze": FREEZE}
    x, y = image_data()
    loss = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")
    net = bn_net()
    names = [p.name for p in net.get_parameters()]
    model = Model(net, loss, nn.Momentum(net.trainable_params(), 0.1, 0.9), boost_level=level,
                  boost_config_dict=config)
    record, first = Outputs(), FirstLayer(net)
    model.train(1, dataset(x, y), callbacks=[record, first], dataset_sink_mode=False)

    control = bn_net()
    boost = AutoBoost(level, config)
    control_net, control_opt = boost.network_auto_process_train(
        control, nn.Momentum(control.trainable_params(), 0.1, 0.9))
    cell = build_train_network(nn.WithLossCell(control_net, loss), control_opt, boost.config)
    cell.set_train()
    control_losses = [float(cell(Tensor(x[s:s + BATCH]), Tensor(y[s:s + BATCH])).asnumpy())
                      for s in range(0, len(x), BATCH)]

    assert [float(out.asnumpy()) for out in record.outputs] == control_losses
    assert_weights_equal(weights_of(net), weights_of(control))
    assert isinstance(net[8], CommonHeadLastFN)
    assert [p.name for p in net.get_parameters()] == [*names[:-1], "8.multiplier"]  # the Dense bias is dropped
    changed = [not np.array_equal(before, after) for before, after in zip(first.weights, first.weights[1:])]
    assert changed == [False, True, False]  # steps 2, 3, 4 train from groups 1, 0, 1


@pytest.mark.slow  # over 3 s alone
def test_o1_checkpoint_and_eval(graph_mode, tmp_path):
    """An O1 checkpoint from ModelCheckpoint loads strictly into AutoBoost's eval transform of a plain network, which
    then predicts as the trained network does; Model.eval with metrics runs the eval network (through the same
    eval transform, which leaves the already transformed backbone as it is) on the trained weights."""
    config = {"level": "O1", "grad_freeze": FREEZE}
    x, y = image_data()
    net = bn_net()
    loss = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")
    model = Model(net, loss, nn.Momentum(net.trainable_params(), 0.1, 0.9), metrics={"acc"},
                  eval_network=nn.WithEvalCell(net, loss), eval_indexes=[0, 1, 2], boost_level="O1",
                  boost_config_dict=config)
    checkpoint = ModelCheckpoint("o1", str(tmp_path), CheckpointConfig(save_checkpoint_steps=STEPS))
    model.train(2, dataset(x, y), callbacks=[LossMonitor(), TimeMonitor(), checkpoint], dataset_sink_mode=False)
    plain = AutoBoost("O1", config).network_auto_process_eval(bn_net(seed=1))
    not_loaded, _ = ms.load_param_into_net(plain, ms.load_checkpoint(str(sorted(tmp_path.glob("o1*.ckpt"))[-1])),
                                           strict_load=True)
    assert not_loaded == []
    net.set_train(False)
    plain.set_train(False)
    logits = net(Tensor(x)).asnumpy()
    np.testing.assert_array_equal(plain(Tensor(x)).asnumpy(), logits)
    expected = float((logits.argmax(axis=1) == y).mean())
    assert model.eval(dataset(x, y), dataset_sink_mode=False)["acc"] == pytest.approx(expected)


def test_standalone_adasum_is_the_plain_step(graph_mode):
    """AdaSum over one group is that group's own step: stand-alone, an AdaSum config trains exactly as O0."""
    x, y = classification_data()
    net, loss, opt = setup()
    model = Model(net, loss, opt, boost_config_dict={"boost": {"mode": "manual", "adasum": True}})
    model.train(1, dataset(x, y), dataset_sink_mode=False)
    assert_weights_equal(weights_of(net), control_weights(x, y, epochs=1))
