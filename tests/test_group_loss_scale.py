"""Group loss scaling: GroupLossScaleManager and the GroupLossScale part, against NumPy references.

The test network has two layer groups, each a linear layer whose weight gradient can be poisoned with inf by an
input (``f1``, ``f2``): that plants an overflow in exactly one group, on chosen steps, in both execution modes.
"""
import importlib
import json
import sys
from pathlib import Path

import numpy as np
import pytest
import mindspore as ms
from mindspore import Tensor, nn, ops
from mindspore.common import dtype as mstype
from mindspore.train.loss_scale_manager import LossScaleManager

from boost_cells import (BoostConfig, BoostTrainOneStepWithLossScaleCell, GroupLossScaleManager,
                         build_train_network)
from boost_cells.scaling.group_loss_scale import GroupLossScale
from tests.group_net import TwoGroupNet, WithMSE, numpy_two_group_grads
from tests.helpers import HUGE, NumpyOptimizer, accumulation, numpy_policy
from tests.distributed import group_worker
from tests.launch import msrun

GROUP_WORKER = Path(__file__).resolve().parent / "distributed" / "group_worker.py"
GROUP_CONFIG = {"boost": {"mode": "manual", "loss_scale_group": True}}
ONE, INF = Tensor(1.0, mstype.float32), Tensor(np.inf, mstype.float32)


def make_batch(seed=1):
    rng = np.random.RandomState(seed)
    return rng.randn(6, 4).astype(np.float32), rng.randn(6, 3).astype(np.float32)


class DenseTwoGroupNet(TwoGroupNet):
    """TwoGroupNet with nn.Dense layers (same weights), no poison inputs: for to_float(float16), which does not
    compose with a custom-bprop cell on a Parameter in GRAPH_MODE."""

    def __init__(self, manager):
        super().__init__(manager)
        for name in ("l1", "l2"):
            layer = getattr(self, name)
            out_channels, in_channels = layer.weight.shape
            setattr(self, name, nn.Dense(in_channels, out_channels, weight_init=Tensor(layer.weight.asnumpy()),
                                         bias_init=Tensor(layer.bias.asnumpy())))

    def construct(self, x, f1, f2):
        x = self.manager(x, 0, 1)
        x = ops.tanh(self.l1(x))
        x = self.manager(x, 1, 2)
        return self.manager(self.l2(x), 2, 3)


def make_cell(init, optimizer="sgd", dtype=None, **kwargs):
    manager = GroupLossScaleManager(init, [], **kwargs)
    net = TwoGroupNet(manager) if dtype is None else DenseTwoGroupNet(manager)
    manager.loss_scale_groups = net.groups()
    if dtype is not None:
        net.to_float(dtype)
    params = net.trainable_params()
    opt = nn.SGD(params, 0.1) if optimizer == "sgd" else nn.Momentum(params, 0.1, 0.9)
    cell = BoostTrainOneStepWithLossScaleCell(WithMSE(net), opt, manager, boost_config=GROUP_CONFIG)
    return cell, net, manager, opt


def values(params):
    return [p.asnumpy().copy() for p in params]


def test_backward_multiplies_each_group_by_its_scale(mode):
    """Group 1's gradients come out times scale 1, group 2's times scale 2, the input's times 1."""
    manager = GroupLossScaleManager([1024.0, 8.0], [])
    net = TwoGroupNet(manager)
    manager.loss_scale_groups = net.groups()
    params = net.trainable_params()
    manager.bind(params)
    x, y = make_batch()
    grad = ops.GradOperation(get_all=True, get_by_list=True)(WithMSE(net), ms.ParameterTuple(params))
    input_grads, param_grads = grad(Tensor(x), Tensor(y), ONE, ONE)
    expected, expected_dx = numpy_two_group_grads(values(params), x, y)
    for got, want, scale in zip(param_grads, expected, [1024.0, 1024.0, 8.0, 8.0]):
        np.testing.assert_allclose(got.asnumpy(), scale * want, rtol=2e-5, atol=1e-6)
    np.testing.assert_allclose(input_grads[0].asnumpy(), expected_dx, rtol=2e-5, atol=1e-7)


def test_clean_steps_equal_unscaled_float32_sgd(mode):
    cell, net, _, _ = make_cell([4096.0, 32.0])
    x, y = make_batch()
    params = net.trainable_params()
    reference = values(params)
    for _ in range(3):
        grads, _ = numpy_two_group_grads(reference, x, y)
        reference = [p - 0.1 * g for p, g in zip(reference, grads)]
        loss, overflow, scale = cell(Tensor(x), Tensor(y), ONE, ONE)
        assert not overflow.asnumpy() and scale.asnumpy() == 4096.0 and np.isfinite(loss.asnumpy())
        for got, want in zip(values(params), reference):
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


# Planted overflows per step: (group 1, group 2).
PLANTED = [(False, False), (True, False), (False, False), (False, True), (False, False), (False, False),
           (True, True), (False, False), (False, False), (False, True), (False, True), (False, False),
           (False, False), (False, False)]


def test_scale_trajectories_with_planted_overflows(mode):
    """Each group's scale follows the NumPy policy on its own flags (window 2, factor 2, clamped to [4, 128]);
    a step with any overflow changes no weight and no optimizer state; the others match NumPy Momentum."""
    cell, net, manager, opt = make_cell([64.0, 16.0], optimizer="momentum", scale_window=2, min_scale=4.0,
                                        max_scale=128.0)
    expected = [numpy_policy(init, 2.0, 2, 4.0, 128.0, 1, [step[g] for step in PLANTED])
                for g, init in enumerate([64.0, 16.0])]
    x, y = make_batch()
    params = net.trainable_params()
    reference, numpy_opt = values(params), NumpyOptimizer(0.1, 0.9)
    for step, (bad1, bad2) in enumerate(PLANTED):
        before = values(opt.parameters) + values(opt.moments)
        _, overflow, scale = cell(Tensor(x), Tensor(y), INF if bad1 else ONE, INF if bad2 else ONE)
        np.testing.assert_array_equal(manager.scales.asnumpy(), [expected[0][step], expected[1][step]])
        assert bool(overflow.asnumpy()) == (bad1 or bad2)
        assert float(scale.asnumpy()) == expected[0][step]
        if bad1 or bad2:
            for got, want in zip(values(opt.parameters) + values(opt.moments), before):
                np.testing.assert_array_equal(got, want)
        else:
            reference = numpy_opt.step(reference, numpy_two_group_grads(reference, x, y)[0])
            for got, want in zip(values(params), reference):
                np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


class _AlwaysOverflow(nn.Cell):
    """Detector stand-in for Ascend saturation mode: the register reports an overflow that no gradient shows."""

    def start(self, loss, sens):
        return Tensor(0, mstype.int32), sens

    def construct(self, status, grads):
        return Tensor(True)


def test_step_overflow_no_group_shows_lowers_every_group(graph_mode):
    manager = GroupLossScaleManager([64.0, 16.0], [])
    net = TwoGroupNet(manager)
    manager.loss_scale_groups = net.groups()
    params = net.trainable_params()
    cell = BoostTrainOneStepWithLossScaleCell(WithMSE(net), nn.SGD(params, 0.1), manager,
                                              overflow_detector=_AlwaysOverflow())
    before = values(params)
    x, y = make_batch()
    _, overflow, _ = cell(Tensor(x), Tensor(y), ONE, ONE)
    assert overflow.asnumpy()
    np.testing.assert_array_equal(manager.scales.asnumpy(), [32.0, 8.0])
    for got, want in zip(values(params), before):
        np.testing.assert_array_equal(got, want)


def test_float16_network_keeps_scale_ratios_above_65504(mode):
    """to_float(float16) leaves the manager in float32: a scale of 2**17 (a float16 inf) still trains, and the
    update matches the float32 one to float16 precision."""
    cell, net, manager, _ = make_cell([2.0 ** 17, 2.0 ** 17], dtype=mstype.float16, max_scale=2.0 ** 20)
    x, y = make_batch()
    params = net.trainable_params()
    w1, b1, w2, b2 = values(params)
    y = (np.tanh(x @ w1.T + b1) @ w2.T + b2 + 0.05 * y).astype(np.float32)  # small errors: 2**17 * dW2 < 65504
    grads, _ = numpy_two_group_grads(values(params), x, y)
    reference = [p - 0.1 * g for p, g in zip(values(params), grads)]
    _, overflow, scale = cell(Tensor(x), Tensor(y), ONE, ONE)
    assert not overflow.asnumpy() and scale.asnumpy() == 2.0 ** 17
    for got, want in zip(values(params), reference):
        np.testing.assert_allclose(got, want, rtol=1e-2, atol=2e-3)
    assert manager.output_dtype == mstype.float16


def test_names_and_checkpoint(graph_mode, tmp_path):
    """The network's parameter names do not change; the scales and counters checkpoint and load back."""
    cell, net, manager, _ = make_cell([64.0, 16.0], scale_window=1)
    names = [p.name for p in net.trainable_params()]
    x, y = make_batch()
    cell(Tensor(x), Tensor(y), ONE, ONE)
    assert [p.name for p in net.trainable_params()] == names == ["l1.weight", "l1.bias", "l2.weight", "l2.bias"]
    state = {p.name for p in cell.get_parameters()}
    assert {"group_loss_scale.scales", "group_loss_scale.clean_steps"} <= state
    path = str(tmp_path / "step.ckpt")
    ms.save_checkpoint(cell, path)
    fresh, _, fresh_manager, _ = make_cell([64.0, 16.0], scale_window=1)
    ms.load_param_into_net(fresh, ms.load_checkpoint(path), strict_load=True)
    np.testing.assert_array_equal(fresh_manager.scales.asnumpy(), [128.0, 32.0])


REFERENCE_EXAMPLE = '''
class Net(nn.Cell):
    def __init__(self, enhanced_amp, num_class=10, num_channel=1):
        super().__init__()
        self.conv1 = nn.Conv2d(num_channel, 6, 5, pad_mode='valid')
        self.conv2 = nn.Conv2d(6, 16, 5, pad_mode='valid')
        self.fc1 = nn.Dense(16*5*5, 120, weight_init='ones')
        self.fc2 = nn.Dense(120, 84, weight_init='ones')
        self.fc3 = nn.Dense(84, num_class, weight_init='ones')
        self.relu = nn.ReLU()
        self.max_pool2d = nn.MaxPool2d(kernel_size=2, stride=2)
        self.flatten = nn.Flatten()
        self.enhanced_amp = enhanced_amp

    def construct(self, x):
        x = self.enhanced_amp(x, 0, 1)
        x = self.max_pool2d(self.relu(self.conv1(x)))
        x = self.max_pool2d(self.relu(self.conv2(x)))
        x = self.flatten(x)
        x = self.enhanced_amp(x, 1, 2)
        x = self.relu(self.fc1(x))
        x = self.relu(self.fc2(x))
        x = self.fc3(x)
        x = self.enhanced_amp(x, 2, 3)
        return x

loss_scale_manager = boost.GroupLossScaleManager(4096, [])
net = Net(loss_scale_manager)
param_group1 = []
param_group2 = []
for param in net.trainable_params():
    if 'conv' in param.name:
        param_group1.append(param)
    else:
        param_group2.append(param)
loss_scale_manager.loss_scale_groups = [param_group1, param_group2]
loss = nn.SoftmaxCrossEntropyWithLogits()
optim = nn.Momentum(params=net.trainable_params(), learning_rate=0.1, momentum=0.9)
boost_config_dict = {"boost": {"mode": "manual", "less_bn": False, "grad_freeze": False, "adasum": False,
                     "grad_accumulation": False, "dim_reduce": False, "loss_scale_group": True}}
model = boost.Model(net, loss_fn=loss, optimizer=optim, metrics=None,
                    loss_scale_manager=loss_scale_manager,
                    boost_level="O1", boost_config_dict=boost_config_dict)
'''


def create_dataset():
    """Eight random 1x32x32 images with one-hot labels, in batches of four (stands in for MNIST)."""
    rng = np.random.RandomState(0)
    images = rng.rand(8, 1, 32, 32).astype(np.float32)
    labels = np.eye(10, dtype=np.float32)[rng.randint(0, 10, 8)]
    return ms.dataset.NumpySlicesDataset({"image": images, "label": labels}, shuffle=False).batch(4)


@pytest.mark.slow  # over 3 s alone
def test_reference_docstring_example(graph_mode, tmp_path, monkeypatch):
    """mindspore.boost.GroupLossScaleManager's docstring example, verbatim but for the imports: ``import
    boost_cells as boost``, and ``boost.Model`` for ``ms.train.Model`` (MindSpore's Model hard-wires
    mindspore.boost). The example is written to a module file: GRAPH_MODE compiles ``construct`` from its source.
    ``model.train(2, dataset)`` then trains with a scale per group."""
    path = tmp_path / "reference_example.py"
    path.write_text("import mindspore as ms\nimport boost_cells as boost\nfrom mindspore import nn\n" +
                    REFERENCE_EXAMPLE)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "reference_example", raising=False)
    example = importlib.import_module("reference_example")
    net, manager = example.net, example.loss_scale_manager
    fc3_before = net.fc3.weight.asnumpy().copy()
    example.model.train(2, create_dataset())
    assert isinstance(example.model.train_network.loss_scale, GroupLossScale)
    assert manager.scales.shape == (2,)
    assert not np.array_equal(net.fc3.weight.asnumpy(), fc3_before)


def test_build_train_network_and_config_flag(graph_mode):
    manager = GroupLossScaleManager(64.0, [])
    net = TwoGroupNet(manager)
    manager.loss_scale_groups = net.groups()
    opt = nn.SGD(net.trainable_params(), 0.1)
    config = BoostConfig.from_dict(GROUP_CONFIG)
    cell = build_train_network(WithMSE(net), opt, config, loss_scale_manager=manager)
    assert isinstance(cell, BoostTrainOneStepWithLossScaleCell) and isinstance(cell.loss_scale, GroupLossScale)
    with pytest.raises(ValueError, match="'loss_scale_manager' must be a GroupLossScaleManager"):
        build_train_network(WithMSE(net), opt, config)
    with pytest.raises(TypeError, match="'scale_sense' must be a GroupLossScaleManager"):
        BoostTrainOneStepWithLossScaleCell(WithMSE(net), opt, Tensor(8.0), boost_config=config)
    cell.set_sense_scale(Tensor(32.0))
    np.testing.assert_array_equal(manager.scales.asnumpy(), [32.0, 32.0])
    # What Model.train and mindspore.amp ask of a loss_scale_manager.
    assert isinstance(manager, LossScaleManager) and manager.get_update_cell() is manager
    assert manager.get_drop_overflow_update() and manager.get_loss_scale() == 64.0
    manager.update_loss_scale(True)
    np.testing.assert_array_equal(manager.scales.asnumpy(), [32.0, 32.0])


def _bad_groups(net):
    return [[net.l1.weight], [net.l1.weight, net.l2.weight]]


@pytest.mark.parametrize("kwargs, error, match", [
    ({"init_loss_scale": 0}, ValueError, "'init_loss_scale' must be a number in"),
    ({"init_loss_scale": float("inf")}, ValueError, "'init_loss_scale'"),
    ({"init_loss_scale": "64"}, TypeError, "'init_loss_scale' must be a number in \\(0, 2\\*\\*64\\], but got '64'"),
    ({"init_loss_scale": []}, ValueError, "non-empty list"),
    ({"init_loss_scale": [64.0, -1.0]}, ValueError, "'init_loss_scale'"),
    ({"loss_scale_groups": None}, TypeError, "'loss_scale_groups' must be a list of lists"),
    ({"scale_factor": 1.0}, ValueError, "'scale_factor' must be a finite number > 1"),
    ({"scale_window": 0}, ValueError, r"'scale_window' must be an int in \[1, 2147483647\]"),
    ({"min_scale": 8.0, "max_scale": 4.0}, ValueError, "'min_scale'"),
])
def test_bad_arguments(kwargs, error, match):
    arguments = {"init_loss_scale": 64.0, "loss_scale_groups": [], **kwargs}
    with pytest.raises(error, match=match):
        GroupLossScaleManager(**arguments)


def test_bad_groups_and_binding(graph_mode):
    manager = GroupLossScaleManager([64.0, 16.0, 4.0], [])
    net = TwoGroupNet(manager)
    opt = nn.SGD(net.trainable_params(), 0.1)
    with pytest.raises(TypeError, match=r"'loss_scale_groups\[0\]' must be a non-empty list of Parameters"):
        manager.loss_scale_groups = [net.l1.weight, net.l1.bias]
    with pytest.raises(ValueError, match="must be disjoint, but parameter 'l1.weight'"):
        manager.loss_scale_groups = _bad_groups(net)
    with pytest.raises(ValueError, match="'loss_scale_groups' is empty"):
        BoostTrainOneStepWithLossScaleCell(WithMSE(net), opt, manager)
    manager.loss_scale_groups = [[net.l1.weight, net.l1.bias], [net.l2.weight]]
    with pytest.raises(ValueError, match=r"\['l2.bias'\] in none"):
        BoostTrainOneStepWithLossScaleCell(WithMSE(net), opt, manager)
    manager.loss_scale_groups = net.groups()
    with pytest.raises(ValueError, match=r"one value per group \(2\), but got 3 values"):
        BoostTrainOneStepWithLossScaleCell(WithMSE(net), opt, manager)


@pytest.fixture(scope="module")
def two_workers(tmp_path_factory):
    out = tmp_path_factory.mktemp("group_dp2")
    code, output = msrun(2, [GROUP_WORKER, out], out / "logs", timeout=240)
    assert code == 0, output[-5000:]
    return [dict(np.load(out / f"group_rank{rank}.npz")) for rank in range(2)]


@pytest.mark.slow  # an msrun job
def test_data_parallel_overflow_on_one_rank_moves_that_group_on_every_rank(two_workers):
    """2-worker msrun: group 2 overflows on rank 1 at step 1, group 1 on rank 0 at step 2. Both ranks skip both
    steps and move the same group's scale; the replicas stay bit-identical and match NumPy SGD on the global
    batches of the clean steps."""
    for key, value in two_workers[0].items():
        np.testing.assert_array_equal(two_workers[1][key], value, err_msg=key)
    result = two_workers[0]
    planted = [[group_worker.PLANTED.get((step, rank)) for rank in range(2)] for step in range(group_worker.STEPS)]
    flags = [[1 in step for step in planted], [2 in step for step in planted]]
    np.testing.assert_array_equal(result["overflows"], [a or b for a, b in zip(*flags)])
    expected = [numpy_policy(init, 2.0, 2, 1.0, 2.0 ** 24, 1, flags[g]) for g, init in enumerate([64.0, 16.0])]
    np.testing.assert_array_equal(result["scales"], np.array(expected).T)
    params = [p.asnumpy() for p in TwoGroupNet(GroupLossScaleManager(1.0, [])).trainable_params()]
    for step in range(group_worker.STEPS):
        if not result["overflows"][step]:
            x, y = group_worker.global_batch(step, 2)
            params = [p - 0.1 * g for p, g in zip(params, numpy_two_group_grads(params, x, y)[0])]
    for name, want in zip(("l1.weight", "l1.bias", "l2.weight", "l2.bias"), params):
        np.testing.assert_allclose(result[name], want, rtol=1e-5, atol=1e-6, err_msg=name)


def test_overflow_report_runs_the_backward_pass_from_one(graph_mode, tmp_path):
    """``overflow_report`` with a manager: the report's backward pass starts from 1 (``scale_sense``), since the
    manager's calls apply the group scales inside the network; training goes on after it."""
    path = tmp_path / "overflow.json"
    manager = GroupLossScaleManager([64.0, 16.0], [])
    net = TwoGroupNet(manager)
    manager.loss_scale_groups = net.groups()
    cell = BoostTrainOneStepWithLossScaleCell(WithMSE(net), nn.SGD(net.trainable_params(), 0.1), manager,
                                              overflow_report=str(path))
    x, y = make_batch()
    assert cell(Tensor(x), Tensor(y), ONE, INF)[1].asnumpy()
    assert json.loads(path.read_text())["sens"] == 1.0
    np.testing.assert_array_equal(manager.scales.asnumpy(), [64.0, 8.0])
    assert not cell(Tensor(x), Tensor(y), ONE, ONE)[1].asnumpy()


class _PastTheLossEnd(TwoGroupNet):
    def construct(self, x, f1, f2):
        return self.manager(self.l2(ops.tanh(self.l1(x, f1)), f2), 2, 4)


def test_layer_out_of_range(mode):
    manager = GroupLossScaleManager(64.0, [])
    net = _PastTheLossEnd(manager)
    manager.loss_scale_groups = net.groups()
    cell = BoostTrainOneStepWithLossScaleCell(WithMSE(net), nn.SGD(net.trainable_params(), 0.1), manager)
    x, y = make_batch()
    with pytest.raises(ValueError, match=r"'layer1' and 'layer2' must be ints in \[0, 3\].*but got 2 and 4"):
        cell(Tensor(x), Tensor(y), ONE, ONE)


def test_composes_with_gradient_accumulation(graph_mode):
    """Two micro-steps per update: the unscaled group gradients are averaged, then one SGD step (NumPy)."""
    manager = GroupLossScaleManager([1024.0, 8.0], [])
    net = TwoGroupNet(manager)
    manager.loss_scale_groups = net.groups()
    params = net.trainable_params()
    config = {**accumulation(2), "boost": {"mode": "manual", "grad_accumulation": True, "loss_scale_group": True}}
    cell = BoostTrainOneStepWithLossScaleCell(WithMSE(net), nn.SGD(params, 0.1), manager, boost_config=config)
    batches = [make_batch(seed) for seed in (1, 2)]
    reference = values(params)
    grads = [numpy_two_group_grads(reference, x, y)[0] for x, y in batches]
    reference = [p - 0.1 * (g1 + g2) / 2 for p, g1, g2 in zip(reference, *grads)]
    for x, y in batches:
        cell(Tensor(x), Tensor(y), ONE, ONE)
    for got, want in zip(values(params), reference):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("kwargs, message", [
    ({"init_loss_scale": HUGE}, "'init_loss_scale' must be"),   # was OverflowError in math.isfinite
    ({"init_loss_scale": 1024.0, "min_scale": HUGE}, "'min_scale' must be"),
    ({"init_loss_scale": 1024.0, "scale_factor": HUGE}, "'scale_factor' must be"),   # float()
    ({"init_loss_scale": 1024.0, "scale_window": 2 ** 31}, "'scale_window' must be"),   # int32
])
def test_group_loss_scale_manager_arguments_raise_value_error_naming_them(kwargs, message):
    """Regression, found by tests/test_constructor_properties.py: an int too large for a float raised OverflowError
    (math.isfinite, float()) and a window past int32 (its counter's type) was not refused by name; each is a
    ValueError naming the argument now."""
    with pytest.raises(ValueError, match=message):
        GroupLossScaleManager(loss_scale_groups=[], **kwargs)


def test_the_reference_state_names_and_update_loss_scale_status_match_the_reference():
    """mindspore.boost's manager keeps dynamic_loss_scale (n + 2 scales by layer, 1 at both ends) and layer_loss_scale
    (n + 1 boundary ops), and moves a group's scale with update_loss_scale_status(layer, ratio); they were missing,
    folded into scales. Both managers, bound to two groups at 8, moved alike, read alike."""
    from mindspore.boost import GroupLossScaleManager as Reference  # pylint: disable=import-outside-toplevel
    ours, reference = GroupLossScaleManager(8.0, []), Reference(8.0, [])
    assert ours.dynamic_loss_scale is None and ours.layer_loss_scale is None
    for manager in (ours, reference):
        manager.set_loss_scale_status(2, 8.0)
    for layer, ratio in ((1, 0.5), (0, Tensor(2.0, mstype.float32)), (1, 0.25)):
        assert float(ours.update_loss_scale_status(layer, ratio).asnumpy()) == \
            float(reference.update_loss_scale_status(layer, ratio).asnumpy())
    assert [float(s.asnumpy()) for s in ours.dynamic_loss_scale] == \
        [float(s.asnumpy()) for s in reference.dynamic_loss_scale] == [1.0, 16.0, 1.0, 1.0]
    assert ours.scales.asnumpy().tolist() == [16.0, 1.0]
    assert len(ours.layer_loss_scale) == len(reference.layer_loss_scale) == 3
    x = Tensor(np.ones((2, 3), np.float32))
    grad = ops.grad(lambda value: (ours.layer_loss_scale[1](value, Tensor(4.0, mstype.float32)) * 3).sum())(x)
    assert grad.asnumpy().tolist() == [[12.0] * 3] * 2
    with pytest.raises(ValueError, match="'layer' must be a group index in \\[0, 2\\)"):
        ours.update_loss_scale_status(2, 0.5)
