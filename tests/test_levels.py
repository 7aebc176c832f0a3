"""Levels that fit any network and never assume a run's length in silence: a level's default group count
adapts to the network (at most one group a layer) and ``explain`` says so; the reference's documented
``GradientFreeze`` example runs; a train cell in a loop of one's own says once that it assumes a run of 65536
updates, unless it was told its run."""
import warnings

import numpy as np
import mindspore as ms
import pytest
from mindspore import Parameter, Tensor, nn, ops

from boost_cells import BoostConfigWarning, BoostTrainOneStepCell, GradientFreeze, Model, Run, build_train_network
from boost_cells.explain import explain
from tests.helpers import freeze_config, linear_setup


class LeNet(nn.Cell):
    """Two convolutions and two dense layers: 4 of the reference's layers (a weight with its bias)."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 4, 3, pad_mode="same", has_bias=True)
        self.conv2 = nn.Conv2d(4, 4, 3, pad_mode="same", has_bias=True)
        self.flatten = nn.Flatten()
        self.fc1 = nn.Dense(4 * 8 * 8, 16)
        self.fc2 = nn.Dense(16, 3)
        self.relu = nn.ReLU()

    def construct(self, x):
        return self.fc2(self.relu(self.fc1(self.flatten(self.relu(self.conv2(self.relu(self.conv1(x))))))))


def digits_like(count=32, seed=0):
    rng = np.random.RandomState(seed)
    x = rng.rand(count, 1, 8, 8).astype(np.float32)
    return x, (x.mean(axis=(1, 2, 3)) * 6).astype(np.int32) % 3


@pytest.mark.parametrize("mode", [ms.GRAPH_MODE, ms.PYNATIVE_MODE])
def test_a_level_without_a_file_trains_a_small_network(mode):
    """Model(lenet, ..., boost_level="O1") with no config: the level's 10 groups become the network's 3 layers (the
    reference's layer rule keeps a conv's bias with it: conv1, conv2 + fc1, fc2), the schedule is the automatic one
    (the default freeze_type here; the reference's is the interval schedule) whose levels are the ones the run's
    measured costs pay for (payback: any of them), and it trains."""
    ms.set_context(mode=mode, device_target="CPU")
    ms.set_seed(0)
    net = LeNet()
    model = Model(net, nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean"),
                  nn.Momentum(net.trainable_params(), 0.05, 0.9), boost_level="O1")
    cell = model.train_network
    layers = GradientFreeze(10, 1, 0.7, 100).layers(cell.network)[0]
    assert cell.freeze_plan.groups == len(layers) < 10
    assert cell.freeze_plan.kind == "auto" and cell.freeze_plan.frozen_levels == tuple(range(1, len(layers)))
    x, y = digits_like()
    before = [p.asnumpy().copy() for p in net.trainable_params()]
    model.train(2, ms.dataset.NumpySlicesDataset({"x": x, "y": y}, shuffle=False).batch(8), dataset_sink_mode=False)
    assert any(not np.array_equal(a, p.asnumpy()) for a, p in zip(before, net.trainable_params()))
    lines = "\n".join(explain({"level": "O1"}))
    assert "up to 10 nested suffixes" in lines and "at most one group a layer" in lines


def test_the_references_documented_gradient_freeze_example_runs():
    """mindspore.boost.GradientFreeze's docstring example: 10 groups on a network of one weight. As in the
    reference, every group is the whole network (nothing freezes), with a warning that says so."""
    ms.set_context(mode=ms.PYNATIVE_MODE, device_target="CPU")

    class Net(nn.Cell):
        def __init__(self, in_features, out_features):
            super().__init__()
            self.weight = Parameter(Tensor(np.ones([in_features, out_features]).astype(np.float32)), name="weight")
            self.matmul = ops.MatMul()

        def construct(self, x):
            return self.matmul(x, self.weight)

    size, in_features, out_features = 16, 16, 10
    net = Net(in_features, out_features)
    optimizer = nn.Momentum(net.trainable_params(), learning_rate=0.1, momentum=0.9)
    net_with_loss = nn.WithLossCell(net, nn.MSELoss())
    with pytest.warns(BoostConfigWarning, match="every group is then the whole network, so nothing ever freezes"):
        network, optimizer = GradientFreeze(10, 1, 0.5, 2000).freeze_generate(net_with_loss, optimizer)
    assert all(len(opt.parameters) == 1 for opt in optimizer.opts)
    inputs = Tensor(np.ones([size, in_features]).astype(np.float32))
    label = Tensor(np.zeros([size, out_features]).astype(np.float32))
    cell = BoostTrainOneStepCell(network, optimizer)
    before = net.weight.asnumpy().copy()
    cell(inputs, label)
    assert not np.array_equal(before, net.weight.asnumpy())


def test_a_loop_of_ones_own_says_once_that_it_assumes_the_runs_length():
    """build_train_network with a schedule that depends on the run and no total_steps: the first call warns, once,
    naming grad_freeze.total_steps and the update freezing may start at; a cell told its run (fit_to_run), or a config
    that gives total_steps, says nothing. The plan follows the one rule ``Model.train`` follows: made for the first
    run told, kept (with a warning) for a later run of another length or a given total_steps that differs."""
    ms.set_context(mode=ms.PYNATIVE_MODE, device_target="CPU")
    x, y = (Tensor(np.ones((4, 4), np.float32)), Tensor(np.zeros((4, 3), np.float32)))
    config = freeze_config(param_groups=2, freeze_type=2)
    del config["grad_freeze"]["total_steps"]
    net = nn.SequentialCell([nn.Dense(4, 8), nn.Tanh(), nn.Dense(8, 8), nn.Tanh(), nn.Dense(8, 3)])

    def messages(cell, calls=3):
        with warnings.catch_warnings(record=True) as record:
            warnings.simplefilter("always")
            for _ in range(calls):
                cell(x, y)
        return [str(w.message) for w in record if issubclass(w.category, BoostConfigWarning)]

    def build():
        return build_train_network(nn.WithLossCell(net, nn.MSELoss()), nn.SGD(net.trainable_params(), 0.01), config)

    said = messages(build())
    assert len(said) == 1 and "assumes a run of 65536 updates" in said[0] and "'grad_freeze.total_steps'" in said[0]
    told = build()
    told.fit_to_run(Run(10, 3))
    assert messages(told) == [] and told.freeze_plan.total_steps == 30
    with pytest.warns(BoostConfigWarning, match=r"= 30 updates, but the run has 60 \(20 epochs of 3 steps\)"):
        told.fit_to_run(Run(20, 3))  # a second run keeps the plan the first one fitted, as Model.train does
    assert told.freeze_plan.total_steps == 30
    unknown = build()
    unknown.fit_to_run(Run(None, 3))  # a loop that does not know its length: the plan stays as assumed
    assert len(messages(unknown)) == 1 and unknown.freeze_plan.total_steps == 65536
    config["grad_freeze"]["total_steps"] = 30
    assert messages(build()) == []
    given = build()
    with pytest.warns(BoostConfigWarning, match="made for 'grad_freeze.total_steps' = 30 updates, but the run has 12"):
        given.fit_to_run(Run(4, 3))
    assert given.freeze_plan.total_steps == 30
    _, net_with_loss, opt = linear_setup()
    assert messages(build_train_network(net_with_loss, opt, {"level": "O0"})) == []
