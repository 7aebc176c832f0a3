"""PrefixCache and split_stages: cached prefix outputs equal the uncached forward, a step on cached outputs equals
a step of the whole network with the prefix frozen, and parameter names never change."""
import numpy as np
import mindspore as ms
import pytest
from mindspore import Tensor, nn

from boost_cells import BoostTrainOneStepCell
from boost_cells.transforms import PrefixCache, Stages, split_stages
from tests.helpers import weights_of


def staged_net(seed=0):
    """conv-BN-ReLU, conv-BN-ReLU, pool+flatten, dense: four stages on (N, 1, 8, 8) inputs, 10 logits."""
    ms.set_seed(seed)
    return nn.SequentialCell([
        nn.SequentialCell([nn.Conv2d(1, 4, 3), nn.BatchNorm2d(4), nn.ReLU()]),
        nn.SequentialCell([nn.Conv2d(4, 8, 3), nn.BatchNorm2d(8), nn.ReLU()]),
        nn.SequentialCell([nn.AdaptiveAvgPool2d(1), nn.Flatten()]),
        nn.Dense(8, 10)])


def data(n=20, seed=1):
    rng = np.random.RandomState(seed)
    return rng.rand(n, 1, 8, 8).astype(np.float32), rng.randint(0, 10, n).astype(np.int32)


def test_split_keeps_names_and_cells():
    net = staged_net()
    names = [p.name for p in net.get_parameters()]
    prefix, suffix = split_stages(net, 2)
    assert [p.name for p in prefix.get_parameters()] + [p.name for p in suffix.get_parameters()] == names
    assert [p.name for p in net.get_parameters()] == names
    assert list(prefix)[0] is list(net)[0] and list(suffix)[-1] is list(net)[-1]
    _, head = split_stages(suffix, 1)
    assert [p.name for p in head.get_parameters()] == names[-2:] == ["3.weight", "3.bias"]


def test_cached_outputs_equal_uncached_forward(mode):
    """Filled in batches of 7 (the last one padded from 6 rows) and served in shuffled order, the cache equals the
    prefix run on the same rows, and the suffix on cached outputs equals the whole network in inference mode."""
    x, _ = data()
    net = staged_net()
    prefix, suffix = split_stages(net, 2)
    cache = PrefixCache(prefix, x, batch_size=7)
    assert len(cache) == len(x) and cache.outputs.shape == (20, 8, 8, 8)
    net.set_train(False)
    rows = np.random.RandomState(2).permutation(len(x))
    np.testing.assert_allclose(cache(rows).asnumpy(), prefix(Tensor(x[rows])).asnumpy(), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(suffix(cache(rows)).asnumpy(), net(Tensor(x[rows])).asnumpy(), rtol=1e-5, atol=1e-6)


def test_step_on_cached_outputs_equals_step_with_frozen_prefix(mode):
    """Control: the whole network with its prefix in inference mode and an optimizer over the suffix only. The
    cached run trains the suffix alone on the cache; the suffix weights agree, the prefix (and its BatchNorm
    moving statistics) stays bit-identical."""
    x, y = data()
    loss = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")
    control = staged_net()
    control_prefix, control_suffix = split_stages(control, 2)
    control_cell = nn.TrainOneStepCell(nn.WithLossCell(control, loss),
                                       nn.Momentum(control_suffix.trainable_params(), 0.1, 0.9))
    control_cell.set_train()
    control_prefix.set_train(False)
    net = staged_net()
    prefix, suffix = split_stages(net, 2)
    before = {p.name: p.asnumpy().copy() for p in prefix.get_parameters()}
    cache = PrefixCache(prefix, x)
    cell = BoostTrainOneStepCell(nn.WithLossCell(suffix, loss), nn.Momentum(suffix.trainable_params(), 0.1, 0.9),
                                 boost_config={"level": "O0"})
    cell.set_train()
    for step in range(3):
        rows = np.arange(step * 6, step * 6 + 6)
        cell(cache(rows), Tensor(y[rows]))
        control_cell(Tensor(x[rows]), Tensor(y[rows]))
    trained, expected = weights_of(net), weights_of(control)
    for name in expected:
        np.testing.assert_allclose(trained[name], expected[name], rtol=1e-5, atol=1e-6, err_msg=name)
    for param in prefix.get_parameters():
        np.testing.assert_array_equal(param.asnumpy(), before[param.name], err_msg=param.name)


def test_errors():
    net = staged_net()
    with pytest.raises(ValueError, match=r"'index' must be an int in \[1, 3\]"):
        split_stages(net, 4)
    with pytest.raises(TypeError, match="nn.SequentialCell or Stages"):
        split_stages(nn.Dense(2, 2), 1)
    with pytest.raises(TypeError, match="non-empty list of Cells"):
        Stages([])
    prefix, _ = split_stages(net, 1)
    with pytest.raises(TypeError, match="'inputs' must be a non-empty numpy array"):
        PrefixCache(prefix, [[1.0]])
    with pytest.raises(ValueError, match="'batch_size' must be an int >= 1"):
        PrefixCache(prefix, data()[0], batch_size=0)
