"""LessBN, the feature-normalised head and gradient centralization, each against a NumPy reference; parameter
names and strict checkpoint loads; AutoBoost's less_bn train/eval transforms training a small BN network on CPU."""
import numpy as np
import mindspore as ms
import pytest
from mindspore import Parameter, Tensor, nn, ops
from mindspore.boost import ParameterProcess as RefParameterProcess
from sklearn.datasets import load_digits

from boost_cells import (AutoBoost, BoostTrainOneStepCell, CommonHeadLastFN, LessBN, OptimizerProcess,
                         ParameterProcess, build_train_network)

# O1 with only less_bn (manual mode starts from the level, so grad_freeze is switched off); fn_flag, gc_flag
# default to True.
LESS_BN = {"level": "O1", "boost": {"mode": "manual", "less_bn": True, "grad_freeze": False}}
LESS_BN_NO_FN = {**LESS_BN, "less_bn": {"fn_flag": False}}
GC_WEIGHTS = ("conv2.weight", "fc1.weight", "fc2.weight")   # ndim > 1 and shape[1] % 16 == 0
EPS = 1e-4                                                   # ops.L2Normalize's epsilon


class BNNet(nn.Cell):
    """Two conv+BatchNorm blocks and two Dense layers on 1x8x8 images: conv1 (16, 1, 3, 3) keeps its gradient
    (shape[1] = 1), conv2 (16, 16, 3, 3), fc1 (32, 256) and fc2 (10, 32) are centralized."""

    def __init__(self, seed=0):
        super().__init__()
        ms.set_seed(seed)
        self.conv1 = nn.Conv2d(1, 16, 3, pad_mode="same", weight_init="HeUniform")
        self.bn1 = nn.BatchNorm2d(16)
        self.conv2 = nn.Conv2d(16, 16, 3, stride=2, pad_mode="same", weight_init="HeUniform")
        self.bn2 = nn.BatchNorm2d(16)
        self.relu = nn.ReLU()
        self.flatten = nn.Flatten()
        self.fc1 = nn.Dense(256, 32, weight_init="HeUniform")
        self.fc2 = nn.Dense(32, 10, weight_init="HeUniform")

    def construct(self, x):
        x = self.relu(self.bn1(self.conv1(x)))
        x = self.relu(self.bn2(self.conv2(x)))
        return self.fc2(self.relu(self.fc1(self.flatten(x))))


def with_loss(net):
    return nn.WithLossCell(net, nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean"))


def digits(n_train=512, n_test=256):
    data = load_digits()
    images = (data.images / 16.0).astype(np.float32)[:, None]
    labels = data.target.astype(np.int32)
    return (images[:n_train], labels[:n_train]), (images[-n_test:], labels[-n_test:])


def names(net):
    return [p.name for p in net.get_parameters()]


def numpy_fn_head(x, w, multiplier, bias=None):
    """multiplier * (x / |x| @ (w / |w|)^T + bias), each row's norm floored at sqrt(EPS)."""
    def norm(a):
        return a / np.sqrt(np.maximum((a * a).sum(axis=1, keepdims=True), EPS))
    out = norm(x) @ norm(w).T
    return multiplier * (out if bias is None else out + bias)


def numpy_centralize(g):
    """The reference's rule: for ndim > 1 with shape[1] % 16 == 0, g minus its mean over all axes but the first."""
    if g.ndim > 1 and g.shape[1] % 16 == 0:
        return g - g.mean(axis=tuple(range(1, g.ndim)), keepdims=True)
    return g


def train(config, mode=ms.GRAPH_MODE, epochs=3, batch=32, lr=0.05):
    """Train BNNet through AutoBoost's less_bn transform and a BoostTrainOneStepCell; return what tests inspect."""
    ms.set_context(mode=mode, device_target="CPU")
    (x, y), test = digits()
    net = BNNet()
    boost = AutoBoost(config["level"], config)
    network, optimizer = boost.network_auto_process_train(with_loss(net),
                                                          nn.Momentum(net.trainable_params(), lr, 0.9))
    cell = BoostTrainOneStepCell(network, optimizer, boost_config=config).set_train(True)  # as Model.train does
    losses = [float(cell(Tensor(x[i:i + batch]), Tensor(y[i:i + batch])).asnumpy())
              for _ in range(epochs) for i in range(0, len(x), batch)]
    return {"net": net, "network": network, "optimizer": optimizer, "cell": cell, "losses": losses, "test": test}


@pytest.fixture(scope="module")
def trained_fn():
    """BNNet trained 3 epochs (48 steps) under the less_bn config with fn_flag and gc_flag on (GRAPH_MODE)."""
    return train(LESS_BN)


def test_gc_equals_numpy_through_an_optimizer_step(mode):
    """One Momentum step of the rebuilt optimizer moves every weight by -lr * centralize(g) exactly as NumPy
    says: conv2, fc1, fc2 centralized; conv1 (shape[1] = 1), biases and BatchNorm gamma/beta untouched. Runs on
    CPU, where the reference's Centralization op has no kernel."""
    lr = 0.1
    net = BNNet()
    process = OptimizerProcess(nn.Momentum(net.trainable_params(), lr, 0.9))
    process.add_grad_centralization(net)
    optimizer = process.generate_new_optimizer()
    assert isinstance(optimizer, nn.Momentum)
    (x, y), _ = digits(n_train=16)
    params = optimizer.parameters
    # A Cell, not a bare GradOperation call: after earlier tests in the same process, the bare call in GRAPH_MODE
    # once compiled with another network's shapes (a stale graph cache); a Cell compiles under its own key.
    _, grads = nn.ForwardValueAndGrad(with_loss(net), params, get_by_list=True)(Tensor(x), Tensor(y))
    before = {p.name: p.asnumpy().copy() for p in params}
    optimizer(grads)
    for param, grad in zip(params, grads):
        g = grad.asnumpy()
        expected_g = numpy_centralize(g) if param.name in GC_WEIGHTS else g
        np.testing.assert_allclose(param.asnumpy(), before[param.name] - lr * expected_g, rtol=1e-5, atol=1e-7,
                                   err_msg=param.name)
        if param.name in GC_WEIGHTS:  # centralization really changed this gradient
            assert np.abs(expected_g - g).max() > 1e-3 * np.abs(g).max(), param.name


def test_gc_groups_follow_the_reference_rule():
    """Weights are flagged; biases, gamma/beta, grouped convs and the FN head are not; options are kept."""
    net = BNNet()
    net.conv3 = nn.Conv2d(16, 16, 3, group=4)
    head = LessBN(net, fn_flag=True).network.fc2
    decay = [p for p in net.trainable_params() if "bias" not in p.name]
    rest = [p for p in net.trainable_params() if "bias" in p.name]
    process = OptimizerProcess(nn.SGD([{"params": decay, "weight_decay": 0.01}, {"params": rest}], 0.1))
    process.add_grad_centralization(net)
    flagged = {p.name for g in process.origin_params if g.get("grad_centralization") for p in g["params"]}
    assert flagged == {"conv1.weight", "conv2.weight", "fc1.weight"}
    assert isinstance(head, CommonHeadLastFN)
    assert all(g.get("weight_decay") == 0.01 for g in process.origin_params
               if any(p.name == "conv1.weight" for p in g["params"]))
    total = sorted(p.name for g in process.origin_params for p in g["params"])
    assert total == sorted(p.name for p in net.trainable_params())


def test_lars_is_rebuilt_around_a_centralizing_optimizer():
    """A LARS optimizer comes back as LARS around the same inner class with centralization flags, as the
    reference rebuilds it. Structure only: LARS's LARSUpdate op has no CPU kernel, so no step runs here."""
    net = BNNet()
    inner = nn.Momentum(net.trainable_params(), 0.1, 0.9)
    process = OptimizerProcess(nn.LARS(inner, epsilon=1e-6, coefficient=0.002))
    process.add_grad_centralization(net)
    optimizer = process.generate_new_optimizer()
    assert isinstance(optimizer, nn.LARS) and isinstance(optimizer.opt, nn.Momentum)
    assert optimizer.opt.init_args["momentum"] == 0.9 and optimizer.init_args["coefficient"] == 0.002
    flagged = {p.name for p, gc in zip(optimizer.opt.parameters, optimizer.opt.grad_centralization_flags) if gc}
    assert flagged == {"conv1.weight", "conv2.weight", "fc1.weight", "fc2.weight"}


def test_fn_head_equals_numpy(mode):
    """CommonHeadLastFN: scaled cosine logits plus bias; a zero feature row meets the epsilon floor."""
    rng = np.random.RandomState(0)
    x = rng.randn(5, 8).astype(np.float32)
    x[2] = 0.0
    w, b = rng.randn(3, 8).astype(np.float32), rng.randn(3).astype(np.float32)
    head = CommonHeadLastFN(8, 3, weight_init=Tensor(w), bias_init=Tensor(b))
    head.multiplier.set_data(Tensor(np.array([2.5], np.float32)))
    np.testing.assert_allclose(head(Tensor(x)).asnumpy(), numpy_fn_head(x, w, 2.5, b), rtol=1e-5, atol=1e-6)
    no_bias = CommonHeadLastFN(8, 3, weight_init=Tensor(w), has_bias=False)
    np.testing.assert_allclose(no_bias(Tensor(x)).asnumpy(), numpy_fn_head(x, w, 1.0), rtol=1e-5, atol=1e-6)


def test_less_bn_flags_and_names():
    """The less_bn pass flag on every cell, defer_inline on the network; no name changes (the reference gives
    'network._backbone.conv1.weight'); fn_flag swaps only the last Dense, keeping its weight and prefix."""
    plain = names(BNNet())
    net = BNNet()
    wrapped = LessBN(with_loss(net))
    assert names(wrapped) == plain
    assert wrapped.network.get_flags().get("defer_inline")
    assert all(cell.get_flags().get("less_bn") for _, cell in wrapped.cells_and_names() if cell is not wrapped)

    net = BNNet()
    dense_weight = net.fc2.weight.asnumpy().copy()
    fn = LessBN(with_loss(net), fn_flag=True)
    assert isinstance(net.fc2, CommonHeadLastFN) and isinstance(net.fc1, nn.Dense)
    assert names(fn) == [n for n in plain if n != "fc2.bias"] + ["fc2.multiplier"]
    np.testing.assert_array_equal(net.fc2.weight.asnumpy(), dense_weight)


class Bottleneck(nn.Cell):
    """A stem and one bottleneck residual block (conv-BN-ReLU, conv-BN-ReLU, conv-BN, + identity), the
    structure MindSpore's less_bn pass matches; ``without`` names BatchNorms replaced by nn.Identity."""

    def __init__(self, without=()):
        super().__init__()
        self.stem, self.bn0 = nn.Conv2d(1, 8, 3, pad_mode="same"), nn.BatchNorm2d(8)
        self.conv1, self.bn1 = nn.Conv2d(8, 4, 1), nn.BatchNorm2d(4)
        self.conv2, self.bn2 = nn.Conv2d(4, 4, 3, pad_mode="same"), nn.BatchNorm2d(4)
        self.conv3, self.bn3 = nn.Conv2d(4, 8, 1), nn.BatchNorm2d(8)
        self.relu, self.add, self.flatten = nn.ReLU(), ops.Add(), nn.Flatten()
        self.fc = nn.Dense(8 * 16, 3)
        for name in without:
            setattr(self, name, nn.Identity())

    def construct(self, x):
        identity = self.relu(self.bn0(self.stem(x)))
        out = self.relu(self.bn1(self.conv1(identity)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        return self.fc(self.flatten(self.relu(self.add(out, identity))))


def test_less_bn_pass_removes_the_blocks_inner_batchnorms(graph_mode):
    """MindSpore's less_bn pass really runs on CPU through build_train_network's LessBN (GRAPH_MODE, training
    mode, where a BatchNorm normalises by the batch's statistics): two SGD steps of the bottleneck block give
    bit for bit the losses and weights of the same network without its first two BatchNorms, and differ from
    the plain network's."""
    x = Tensor(np.random.RandomState(0).randn(4, 1, 4, 4).astype(np.float32))
    y = Tensor(np.array([0, 1, 2, 1], np.int32))
    plain, less, without = Bottleneck(), Bottleneck(), Bottleneck(without=("bn1", "bn2"))
    for net in (less, without):
        ms.load_param_into_net(net, {name: Parameter(Tensor(p.asnumpy()), name=name)
                                     for name, p in plain.parameters_dict().items()})
    config = {**LESS_BN, "less_bn": {"fn_flag": False, "gc_flag": False}}
    cells = [build_train_network(with_loss(net), nn.SGD(net.trainable_params(), 0.1), cfg).set_train(True)
             for net, cfg in ((less, config), (without, {"level": "O0"}), (plain, {"level": "O0"}))]
    assert isinstance(cells[0].network, LessBN)
    losses = np.array([[float(cell(x, y).asnumpy()) for cell in cells] for _ in range(2)])
    np.testing.assert_array_equal(losses[:, 0], losses[:, 1])
    assert np.abs(losses[:, 0] - losses[:, 2]).max() > 1e-3
    for name, param in without.parameters_dict().items():
        np.testing.assert_array_equal(less.parameters_dict()[name].asnumpy(), param.asnumpy(), err_msg=name)


def test_less_bn_checkpoint_loads_strictly_into_plain_network(tmp_path):
    """A network trained under less_bn (no FN head) saves a checkpoint that loads with strict_load=True into
    the plain network, every weight and BatchNorm statistic included."""
    run = train(LESS_BN_NO_FN, epochs=1)
    path = str(tmp_path / "less_bn.ckpt")
    ms.save_checkpoint(run["cell"], path)
    plain = BNNet(seed=1)
    not_loaded, _ = ms.load_param_into_net(plain, ms.load_checkpoint(path), strict_load=True)
    assert not not_loaded
    for param in run["net"].get_parameters():
        np.testing.assert_array_equal(plain.parameters_dict()[param.name].asnumpy(), param.asnumpy())


def test_fn_checkpoint_loads_into_eval_transform_and_evaluates_as_trained(trained_fn, tmp_path):
    """An O1-style (fn_flag) checkpoint loads strictly into network_auto_process_eval(plain network); only the
    head's names differ from the plain network's, and the eval network gives the trained network's logits."""
    ms.set_context(mode=ms.GRAPH_MODE, device_target="CPU")
    path = str(tmp_path / "o1.ckpt")
    ms.save_checkpoint(trained_fn["cell"], path)
    plain = BNNet(seed=1)
    plain_names = set(names(plain))
    evaluator = AutoBoost("O1", LESS_BN).network_auto_process_eval(plain)
    not_loaded, _ = ms.load_param_into_net(evaluator, ms.load_checkpoint(path), strict_load=True)
    assert not not_loaded
    assert set(names(evaluator)) ^ plain_names == {"fc2.bias", "fc2.multiplier"}
    evaluator.set_train(False)
    trained = trained_fn["net"]
    trained.set_train(False)
    x = Tensor(trained_fn["test"][0][:64])
    np.testing.assert_allclose(evaluator(x).asnumpy(), trained(x).asnumpy(), rtol=1e-5, atol=1e-5)
    trained.set_train(True)


def test_autoboost_less_bn_trains_bn_network_on_cpu(trained_fn):
    """The O1-style less_bn config (FN head, gradient centralization) trains BNNet on the digits on CPU: the
    loss falls and held-out accuracy beats 75% after 3 epochs of 512 images (chance is 10%)."""
    optimizer = trained_fn["optimizer"]
    assert isinstance(optimizer, nn.Momentum) and any(optimizer.grad_centralization_flags)
    assert "fc2.multiplier" in [p.name for p in optimizer.parameters]
    losses = trained_fn["losses"]
    assert np.mean(losses[-8:]) < 0.5 * np.mean(losses[:8])
    net = trained_fn["net"]
    net.set_train(False)
    images, labels = trained_fn["test"]
    accuracy = float((net(Tensor(images)).asnumpy().argmax(axis=1) == labels).mean())
    net.set_train(True)
    assert accuracy > 0.75, accuracy


def test_build_train_network_applies_less_bn_once():
    """build_train_network applies the less_bn transform; after AutoBoost's it changes nothing (same optimizer,
    one head), and a new loss cell around a transformed backbone gets no second head."""
    net = BNNet()
    cell = build_train_network(with_loss(net), nn.Momentum(net.trainable_params(), 0.1, 0.9), LESS_BN)
    assert isinstance(cell.network, LessBN) and isinstance(net.fc2, CommonHeadLastFN)
    assert any(cell.optimizer.grad_centralization_flags)

    net = BNNet()
    network, optimizer = AutoBoost("O1", LESS_BN).network_auto_process_train(
        with_loss(net), nn.Momentum(net.trainable_params(), 0.1, 0.9))
    cell = build_train_network(network, optimizer, LESS_BN)
    assert cell.network is network and cell.optimizer is optimizer
    LessBN(with_loss(net), fn_flag=True)
    assert isinstance(net.fc1, nn.Dense) and isinstance(net.fc2, CommonHeadLastFN)


def test_parameter_process_matches_reference():
    """generate_group_params and assign_parameter_group give the reference's groups and fusion indices."""
    def fresh():
        return [Parameter(Tensor(np.ones(2, np.float32)), name=f"p{i}") for i in range(5)]
    old = fresh()
    origin = [{"params": old[:2], "lr": 0.1}, {"params": old[2:3], "weight_decay": 0.01, "lr": 0.2},
              {"order_params": old[:3]}]
    for new_params in (fresh(), fresh()[1:]):
        ours = ParameterProcess.generate_group_params(new_params, origin)
        ref = RefParameterProcess.generate_group_params(new_params, origin)
        assert len(ours) == len(ref)
        for got, want in zip(ours, ref):
            assert got.keys() == want.keys()
            for key in got:
                if key in ("params", "order_params"):
                    assert [id(p) for p in got[key]] == [id(p) for p in want[key]]
                else:
                    assert got[key] == want[key]
    assert ParameterProcess.generate_group_params(old[:1], old) == [{"params": old[:1]}]
    for split in (None, [1, 3]):
        ours, ref = fresh(), fresh()
        ParameterProcess().assign_parameter_group(ours, split)
        RefParameterProcess().assign_parameter_group(ref, split)
        assert [p.comm_fusion for p in ours] == [p.comm_fusion for p in ref]


def test_bad_input_is_refused():
    class NoDense(nn.Cell):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(1, 2, 3)

        def construct(self, x):
            return self.conv(x)

    with pytest.raises(ValueError, match="'fn_flag'.*nn.Dense"):
        LessBN(NoDense(), fn_flag=True)
    with pytest.raises(TypeError, match="'fn_flag' must be a bool"):
        LessBN(BNNet(), fn_flag=1)
    with pytest.raises(TypeError, match="'network' must be a Cell"):
        LessBN(lambda x: x)
    with pytest.raises(TypeError, match="'opt' must be an nn.Optimizer"):
        OptimizerProcess(BNNet())
    with pytest.raises(ValueError, match="must not be empty"):
        ParameterProcess.generate_group_params([], [])
    with pytest.raises(TypeError, match="list of Parameter or of group dicts"):
        ParameterProcess.generate_group_params([], [1, 2])
