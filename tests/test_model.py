"""boost_cells.Model: the boost level builds boost_cells' train cell, with or without metrics; amp_level and
loss_scale_manager honoured as mindspore.train.Model honours them; callbacks, checkpoints and eval work."""
import numpy as np
import mindspore as ms
import mindspore.dataset as ds
import pytest
from mindspore import Tensor, nn
from mindspore.train import Callback, LossMonitor, TimeMonitor
from mindspore.train.callback import CheckpointConfig, ModelCheckpoint

from boost_cells import BoostTrainOneStepCell, BoostTrainOneStepWithLossScaleCell, Model
from tests.helpers import Linear, weights_of

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
