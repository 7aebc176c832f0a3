"""LessBN, the feature-normalised head and gradient centralization, each against a NumPy reference; parameter
names and strict checkpoint loads; AutoBoost's less_bn train/eval transforms training a small BN network on CPU;
all three under mixed precision (amp levels O1 to O3), as the model zoo calls Model."""
import warnings

import numpy as np
import mindspore as ms
import mindspore.dataset as ds
import pytest
from mindspore import Parameter, Tensor, nn, ops
from mindspore.boost import ParameterProcess as RefParameterProcess
from mindspore.boost.less_batch_normalization import CommonHeadLastFN as RefCommonHeadLastFN
from mindspore.common import dtype as mstype
from mindspore.train import FixedLossScaleManager
from sklearn.datasets import load_digits

from boost_cells import (AutoBoost, BoostTrainOneStepCell, CommonHeadLastFN, LessBN, Model, OptimizerProcess,
                         ParameterProcess, build_train_network)
from boost_cells.mindspore_internals import amp_network
from boost_cells.transforms.less_bn import is_less_bn

# O1 with only less_bn (manual mode starts from the level, so grad_freeze is switched off); fn_flag, gc_flag
# default to True.
LESS_BN = {"level": "O1", "boost": {"mode": "manual", "less_bn": True, "grad_freeze": False}}
LESS_BN_NO_FN = {**LESS_BN, "less_bn": {"fn_flag": False}}
GC_WEIGHTS = ("conv2.weight", "fc1.weight", "fc2.weight")   # ndim > 1 and shape[1] % 16 == 0
EPS = 1e-4                                                   # ops.L2Normalize's epsilon
# The dtype of the FN head's logits for float16 features under each amp level, as mindspore.boost's CommonHeadLastFN
# gives it (test_fn_head_under_amp checks the reference against it): O1 casts white-listed operators only, so the
# logits stay float32; O2 and O3 cast the network (to_float(float16)) and the logits follow.
AMP_LOGITS = {"O1": mstype.float32, "O2": mstype.float16, "O3": mstype.float16}


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


@pytest.mark.parametrize("amp_level", sorted(AMP_LOGITS))
def test_fn_head_under_amp(mode, amp_level, tmp_path, monkeypatch):
    """Regression: float16 features met a float32 weight in the head's MatMul under amp O2/O3 in
    GRAPH_MODE. Cast as Model casts a network (amp_network), the head returns the reference's dtype at each level,
    and float32-accurate cosines where float16 features' sum of squares overflows (64 features around 40: 1e5 >
    65504), while the reference's cosines vanish to 0 there and only its bias is left."""
    monkeypatch.chdir(tmp_path)  # O1's rewrite writes the rewritten cells' source to ./rewritten_network
    rng = np.random.RandomState(0)
    w, b = rng.randn(3, 64).astype(np.float32), rng.randn(3).astype(np.float32)
    x = (np.abs(rng.randn(2, 64)) * 40).astype(np.float16)
    ours, ref = (amp_network(cls(64, 3, weight_init=Tensor(w), bias_init=Tensor(b)), None, amp_level)[0](Tensor(x))
                 for cls in (CommonHeadLastFN, RefCommonHeadLastFN))
    assert ours.dtype == ref.dtype == AMP_LOGITS[amp_level]
    np.testing.assert_allclose(ours.asnumpy().astype(np.float32), numpy_fn_head(x.astype(np.float32), w, 1.0, b),
                               rtol=2e-3, atol=2e-3)
    np.testing.assert_allclose(ref.asnumpy().astype(np.float32), np.broadcast_to(b, (2, 3)), rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize("amp_level", sorted(AMP_LOGITS))
def test_model_trains_less_bn_under_amp(mode, amp_level, tmp_path, monkeypatch):
    """Model(net, loss, opt, amp_level=..., boost_level="O1", ...) as the model zoo's ResNet and MobileNetV2 scripts
    call it (metrics, a fixed loss scale of 1024 without skipping, the optimizer's loss_scale to match): the bare O1
    level puts the FN head in place of BNNet's last Dense and centralizes the optimizer's gradients, and two steps
    train every weight to finite values at each amp level; predict gives the head's logits in the reference's
    dtype."""
    monkeypatch.chdir(tmp_path)  # O1's rewrite writes the rewritten cells' source to ./rewritten_network
    (x, y), _ = digits(n_train=16)
    net = BNNet()
    before = [p.asnumpy().copy() for p in net.trainable_params()]
    model = Model(net, nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean"),
                  nn.Momentum(net.trainable_params(), 0.05, 0.9, loss_scale=1024.0), metrics={"acc"},
                  amp_level=amp_level, boost_level="O1",
                  loss_scale_manager=FixedLossScaleManager(1024, drop_overflow_update=False))
    assert isinstance(net.fc2, CommonHeadLastFN) and is_less_bn(model.train_network)
    assert any(any(cell.grad_centralization_flags) for _, cell in model.train_network.cells_and_names()
               if isinstance(cell, nn.Optimizer))
    model.train(1, ds.NumpySlicesDataset({"x": x, "y": y}, shuffle=False).batch(8), dataset_sink_mode=False)
    # By position: O1's rewrite prefixes the parameter names under LessBN (auto_prefix=False) with "network.".
    after = [p.asnumpy() for p in net.trainable_params()]
    assert len(after) == len(before) and all(np.isfinite(a).all() for a in after)
    assert all(np.abs(a - b).max() > 0 for a, b in zip(after, before))
    assert model.predict(Tensor(x[:4])).dtype == AMP_LOGITS[amp_level]


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


@pytest.mark.slow  # over 3 s alone
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


@pytest.mark.slow  # trains to a target accuracy
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


# ---------------------------------------------------------------- what MindSpore's less_bn pass removes


def conv_bn(cin, cout, relu=True, kernel=3, stride=1):
    return [nn.Conv2d(cin, cout, kernel, stride=stride), nn.BatchNorm2d(cout)] + ([nn.ReLU()] if relu else [])


class Residual(nn.Cell):
    """A residual block as the model zoo writes them, ``relu(body(x) + shortcut(x))``: ``basic`` (conv-BN-ReLU,
    conv-BN: BatchNorms ``body.1``, ``body.4``) or ``bottleneck`` (1x1, 3x3, 1x1: ``body.1``, ``body.4``,
    ``body.7``); the shortcut is conv-BN (``shortcut.1``) when the shape changes, else the identity."""

    def __init__(self, kind, cin, cout, stride=1):
        super().__init__()
        if kind == "basic":
            units = conv_bn(cin, cout, stride=stride) + conv_bn(cout, cout, relu=False)
        else:
            mid = cout // 4
            units = conv_bn(cin, mid, kernel=1) + conv_bn(mid, mid, stride=stride) + \
                conv_bn(mid, cout, relu=False, kernel=1)
        self.body = nn.SequentialCell(units)
        self.shortcut = nn.SequentialCell(conv_bn(cin, cout, relu=False, kernel=1, stride=stride)) \
            if stride != 1 or cin != cout else nn.Identity()
        self.relu = nn.ReLU()

    def construct(self, x):
        return self.relu(self.body(x) + self.shortcut(x))


def basic_resnet():
    """A conv-BN-ReLU stem, an identity and a projection basic block, a pooled Dense head (5 BatchNorms)."""
    return nn.SequentialCell([nn.SequentialCell(conv_bn(1, 4)), Residual("basic", 4, 4), Residual("basic", 4, 8, 2),
                              nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Dense(8, 3)])


def bottleneck_resnet():
    """ResNet-50's shape in small: a stem with max-pool, a projection and an identity bottleneck (8 BatchNorms)."""
    return nn.SequentialCell([nn.SequentialCell(conv_bn(1, 8) + [nn.MaxPool2d(2, 2)]), Residual("bottleneck", 8, 16),
                              Residual("bottleneck", 16, 16), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                              nn.Dense(16, 3)])


def trained_looking(net, seed=0):
    """Give every BatchNorm of ``net`` gamma, beta and moving statistics away from their initial 1, 0, 0, 1 (as
    a trained network has them); returns ``net``."""
    rng = np.random.RandomState(seed)
    for _, cell in net.cells_and_names():
        if isinstance(cell, nn.BatchNorm2d):
            size = cell.gamma.shape[0]
            for param, low, high in ((cell.gamma, 0.5, 2), (cell.beta, -1, 1), (cell.moving_mean, -1, 1),
                                     (cell.moving_variance, 0.5, 2)):
                param.set_data(Tensor(rng.uniform(low, high, size).astype(np.float32)))
    return net


class Outputs(nn.Cell):
    """A cell around the network, as WithLossCell and WithEvalCell are (its output times one)."""

    def __init__(self, network):
        super().__init__(auto_prefix=False)
        self.network = network

    def construct(self, x):
        return self.network(x) * 1.0


def dropped_batchnorms(net, wrapped, x):
    """The BatchNorms of ``net`` that ``wrapped`` (a cell holding it) compiles without, in inference mode: those
    whose beta, shifted by 3, leaves the output bit for bit as it was."""
    wrapped.set_train(False)
    before, dropped = wrapped(x).asnumpy(), []
    for name, cell in net.cells_and_names():
        if isinstance(cell, nn.BatchNorm2d):
            beta = cell.beta.asnumpy().copy()
            cell.beta.set_data(Tensor(beta + 3.0))
            if np.array_equal(wrapped(x).asnumpy(), before):
                dropped.append(name)
            cell.beta.set_data(Tensor(beta))
    return dropped


# The pass's result depends on the wrapping: LessBN around the network itself (Model(net, loss_fn, optimizer) and
# network_auto_process_eval(net) do that) or around a cell that holds it (build_train_network(net_with_loss),
# Model(net_with_loss, optimizer=...), network_auto_process_eval(WithEvalCell(net))). Measured on MindSpore 2.10.
BASIC_DIRECT, BASIC_NESTED = [], ["1.body.1", "2.body.1", "2.shortcut.1"]
BOTTLENECK_DIRECT = ["1.body.1", "1.body.4", "1.shortcut.1"]
BOTTLENECK_NESTED = BOTTLENECK_DIRECT + ["2.body.1", "2.body.4"]


@pytest.mark.parametrize("make, direct, nested", [(basic_resnet, BASIC_DIRECT, BASIC_NESTED),
                                                  (bottleneck_resnet, BOTTLENECK_DIRECT, BOTTLENECK_NESTED)],
                         ids=["basic", "bottleneck"])
def test_less_bn_pass_drops_by_structure_and_wrapping(mode, make, direct, nested):
    """Which BatchNorms MindSpore's less_bn pass compiles away (docs/less-bn.md): in GRAPH_MODE, under LessBN(net)
    only a projection bottleneck's bn1, bn2 and shortcut BN; under LessBN(a cell holding net) also the first
    BatchNorm of every basic block (and a projection block's shortcut BN) and bn1, bn2 of every bottleneck. A
    flagged network compiled inside a cell without the flag, and PyNative mode, keep every BatchNorm."""
    x = Tensor(np.random.RandomState(1).randn(2, 1, 8, 8).astype(np.float32))
    graph = mode == "graph"
    net = trained_looking(make())
    assert dropped_batchnorms(net, LessBN(net), x) == (direct if graph else [])
    net = trained_looking(make())
    assert dropped_batchnorms(net, LessBN(Outputs(net)), x) == (nested if graph else [])
    assert dropped_batchnorms(net, Outputs(net), x) == []  # flagged, inside a cell without the flag


@pytest.mark.slow  # ResNets trained, then evaluated through the eval transforms
def test_o1_trained_network_evaluates_plainly_but_a_plain_one_not_through_o1(graph_mode):
    """What the pass means for evaluating (docs/less-bn.md). Trained under LessBN(a cell holding net), the dropped
    BatchNorms keep their initial gamma 1, beta 0, mean 0, variance 1, which in inference is x / sqrt(1 + eps):
    the plain network, network_auto_process_eval(net) and network_auto_process_eval(a cell holding net) all give
    the trained network's logits. A network whose BatchNorms were all trained (plainly, or pretrained) loses
    them through network_auto_process_eval(a cell holding it): its logits change."""
    rng = np.random.RandomState(0)
    x, y = Tensor(rng.randn(8, 1, 8, 8).astype(np.float32)), Tensor(rng.randint(0, 3, 8).astype(np.int32))
    net = basic_resnet()
    loss = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")
    cell = build_train_network(nn.WithLossCell(net, loss), nn.Momentum(net.trainable_params(), 0.05, 0.9),
                               LESS_BN_NO_FN).set_train(True)
    for _ in range(3):
        cell(x, y)
    params = {name: p.asnumpy().copy() for name, p in net.parameters_dict().items()}
    for name in BASIC_NESTED:  # dropped in training: never updated
        for suffix, value in (("gamma", 1.0), ("beta", 0.0), ("moving_mean", 0.0), ("moving_variance", 1.0)):
            assert np.all(params[f"{name}.{suffix}"] == value), (name, suffix)
    assert not np.all(params["2.body.4.moving_mean"] == 0.0)  # kept: trained

    def copy(values):
        fresh = basic_resnet()
        for name, param in fresh.parameters_dict().items():
            param.set_data(Tensor(values[name]))
        return fresh

    def logits(network):
        network.set_train(False)
        return network(x).asnumpy()

    o1 = AutoBoost("O1", LESS_BN_NO_FN)
    trained = logits(net)  # flagged by training's LessBN, compiled as training compiled it
    for evaluated in (copy(params), o1.network_auto_process_eval(copy(params)),
                      o1.network_auto_process_eval(Outputs(copy(params)))):
        np.testing.assert_allclose(logits(evaluated), trained, rtol=1e-4, atol=1e-5)

    pretrained = {name: p.asnumpy() for name, p in trained_looking(basic_resnet(), seed=3).parameters_dict().items()}
    plain = logits(copy(pretrained))
    through_o1 = logits(o1.network_auto_process_eval(Outputs(copy(pretrained))))
    assert np.abs(through_o1 - plain).max() > 0.1


@pytest.mark.slow  # two GRAPH_MODE compiles of a ResNet's step
def test_a_less_bn_step_in_inference_mode_is_named_before_it_fails(graph_mode, tmp_path, monkeypatch):
    """A train cell called before ``set_train()`` steps in inference mode; under LessBN over a network with loss,
    MindSpore's less_bn pass then fails to compile gradient freezing (a TypeError on Concat, as its own
    ``nn.TrainOneStepWithLossScaleCell`` fails on ZerosLike): the first call warns, naming set_train(). In training
    mode the same cell trains without that warning."""
    monkeypatch.chdir(tmp_path)  # where MindSpore writes the failed compile's rank_0/om/analyze_fail.ir
    x = Tensor(np.random.RandomState(2).randn(4, 1, 8, 8).astype(np.float32))
    y = Tensor(np.array([0, 1, 2, 1], np.int32))
    config = {"level": "O1", "boost": {"mode": "manual", "less_bn": True, "grad_freeze": True},
              "grad_freeze": {"total_steps": 100}}
    for train in (False, True):
        net = basic_resnet()
        cell = build_train_network(with_loss(net), nn.Momentum(net.trainable_params(), 0.05, 0.9), config)
        assert is_less_bn(cell.network)
        cell.set_train(train)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                loss = float(cell(x, y).asnumpy())
            except TypeError:
                loss = None
        named = [w for w in caught if "set_train()" in str(w.message)]
        assert len(named) == (0 if train else 1)
        if train:
            assert np.isfinite(loss)
