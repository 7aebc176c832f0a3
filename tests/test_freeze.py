"""Gradient freezing: groups and index sequences against the reference's rule, suffix steps against NumPy, frozen
state bit-identical, the backward pass stopping at the first trained group, accumulation, loss scale, resume."""
import numpy as np
import mindspore as ms
import pytest
from mindspore import Tensor, nn, ops
from mindspore.boost.grad_freeze import GradientFreeze as ReferenceFreeze

from boost_cells import (AutoBoost, BoostTrainOneStepCell, BoostTrainOneStepWithLossScaleCell, DynamicLossScaleUpdate,
                         FreezeOpt, GradientFreeze, build_train_network, freeze_cell)
from boost_cells.config import BoostConfig
from boost_cells.user_warnings import BoostConfigWarning
from tests.helpers import GROUP_STARTS, TanhMLP, data, freeze_config, mlp_setup, numpy_mlp_grads, state


def numpy_freeze_run(net, batches, indices, lrs, momentum=0.9):
    """Momentum steps in float64 where step t updates (and moves the velocity of) parameters from
    ``GROUP_STARTS[indices[t]]`` on, with learning rate ``lrs[t]``."""
    params = [p.asnumpy().astype(np.float64) for p in net.trainable_params()]
    velocity = [np.zeros_like(p) for p in params]
    for (x, y), index, lr in zip(batches, indices, lrs):
        grads = numpy_mlp_grads(params, x.asnumpy().astype(np.float64), y.asnumpy().astype(np.float64))
        for j in range(GROUP_STARTS[index], len(params)):
            velocity[j] = momentum * velocity[j] + grads[j]
            params[j] = params[j] - lr * velocity[j]
    return params


# ---------------------------------------------------------------- groups and index sequences


def test_groups_follow_the_reference_rule():
    """Front-to-back nested suffixes; a conv's BatchNorm stays with it (compared with mindspore.boost's split)."""
    class ConvBN(nn.Cell):
        def __init__(self):
            super().__init__()
            self.conv1 = nn.Conv2d(1, 2, 3, has_bias=False)
            self.bn1 = nn.BatchNorm2d(2)
            self.conv2 = nn.Conv2d(2, 2, 3, has_bias=False)
            self.bn2 = nn.BatchNorm2d(2)
            self.fc = nn.Dense(8, 3)

        def construct(self, x):
            return x

    for net, groups in ((TanhMLP(), 3), (ConvBN(), 2), (ConvBN(), 3)):
        ours = GradientFreeze(groups, 0, 0.5, 10).split_parameters_groups(net, groups)
        reference = ReferenceFreeze(groups, 0, 0.5, 10).split_parameters_groups(net, groups)
        assert [[p.name for p in g] for g in ours] == [[p.name for p in g] for g in reference]
    names = [[p.name for p in g] for g in GradientFreeze(3, 0, 0.5, 10).split_parameters_groups(ConvBN(), 3)]
    assert names[1] == ["conv2.weight", "bn2.gamma", "bn2.beta", "fc.weight", "fc.bias"]
    assert names[2] == ["fc.weight", "fc.bias"]


@pytest.mark.parametrize("groups, freeze_p", [(3, 0.5), (10, 0.7), (4, 0.3), (5, 0.0), (2, 0.9)])
def test_continuous_sequence_is_the_references(groups, freeze_p):
    ours = GradientFreeze(groups, 0, freeze_p, 50).generate_freeze_index_sequence(groups, 0, freeze_p, 50)
    assert ours == ReferenceFreeze(groups, 0, freeze_p, 50).generate_freeze_index_sequence(groups, 0, freeze_p, 50)
    assert GradientFreeze(4, 0, 0.5, 10).generate_freeze_index_sequence(4, 0, 0.5, 10) == [0, 0, 0, 1, 2, 3] * 2
    assert set(GradientFreeze(4, 0, 1.0, 10).generate_freeze_index_sequence(4, 0, 1.0, 10)) == {0}


def test_interval_sequence_statistics_and_seed():
    groups, freeze_p, steps = 5, 0.7, 20000
    sequence = np.array(GradientFreeze(groups, 1, freeze_p, steps).generate_freeze_index_sequence(
        groups, 1, freeze_p, steps))
    np.random.seed(0)
    reference = np.array(ReferenceFreeze(groups, 1, freeze_p, steps).generate_freeze_index_sequence(
        groups, 1, freeze_p, steps))
    assert len(sequence) == len(reference) == int(steps * 1.01)
    np.testing.assert_array_equal(sequence == 0, reference == 0)  # which steps train everything: the same rule
    assert abs(np.mean(sequence == 0) - freeze_p) < 1e-3
    frozen = sequence[sequence > 0]
    expected = {index: (groups - index) / sum(range(1, groups)) for index in range(1, groups)}
    for index, share in expected.items():
        assert abs(np.mean(frozen == index) - share) < 0.02, (index, np.mean(frozen == index), share)
    again = GradientFreeze(groups, 1, freeze_p, 200, seed=0).generate_freeze_index_sequence(groups, 1, freeze_p, 200)
    other = GradientFreeze(groups, 1, freeze_p, 200, seed=1).generate_freeze_index_sequence(groups, 1, freeze_p, 200)
    assert again == list(sequence[:202]) and other != again
    assert (np.array(other) == 0).tolist() == (np.array(again) == 0).tolist()


def test_progressive_sequence_rule():
    """0 for round(p * T) steps, then 1 .. groups-1 in equal stages, holding the last index."""
    assert freeze_sequence(3, 0.5, 8) == [0, 0, 0, 0, 1, 1, 2, 2]
    assert freeze_sequence(4, 0.25, 100)[:25] == [0] * 25
    long = freeze_sequence(4, 0.25, 100)
    assert [long.index(k) for k in (1, 2, 3)] == [25, 50, 75] and long[-1] == 3 and len(long) == 101
    assert np.all(np.diff(long) >= 0)


def freeze_sequence(groups, freeze_p, steps):
    return GradientFreeze(groups, 2, freeze_p, steps).generate_freeze_index_sequence(groups, 2, freeze_p, steps)


@pytest.mark.parametrize("args, message", [
    ((3, 4, 0.5, 10), "'freeze_type' must be one of 0"),
    ((3, True, 0.5, 10), "'freeze_type' must be one of 0"),
    ((3, 1, 1.5, 10), r"'freeze_p' must be a number in \[0, 1\]"),
    ((3, 1, -0.1, 10), r"'freeze_p' must be a number in \[0, 1\]"),
    ((0, 1, 0.5, 10), "'param_groups' must be an int >= 1"),
    ((3, 1, 0.5, 0), "'total_steps' must be an int in \\[1, 2147483647\\]"),
])
def test_bad_arguments_raise(args, message):
    with pytest.raises(ValueError, match=message):
        GradientFreeze(*args)


def test_more_groups_than_layers_mean_what_the_reference_makes_them_mean():
    """GradientFreeze given more groups than the network has layers (the reference's own documented example: 10 groups
    on one weight) runs as mindspore.boost's does, every group the whole network, with a warning; a config that
    gives such a param_groups is refused, naming the key and the layer count; one that leaves it out fits the level's
    default to the network."""
    _, net_with_loss, opt = mlp_setup()
    with pytest.warns(BoostConfigWarning, match=r"'param_groups' is 4 but the network has 3 layer\(s\)"):
        groups = GradientFreeze(4, 0, 0.5, 10).split_parameters_groups(net_with_loss, 4)
    reference = ReferenceFreeze(4, 0, 0.5, 10).split_parameters_groups(net_with_loss, 4)
    assert [[p.name for p in g] for g in groups] == [[p.name for p in g] for g in reference]
    with pytest.raises(ValueError, match=r"'grad_freeze.param_groups' must be at most the network's 3 layer\(s\)"
                                         r".*got 4"):
        build_train_network(net_with_loss, opt, freeze_config(param_groups=4))
    config = freeze_config()
    del config["grad_freeze"]["param_groups"]  # the level's default, 10
    cell = build_train_network(net_with_loss, opt, config)
    assert [len(o.parameters) for o in cell.optimizer.opts] == [12, 8, 4]
    with pytest.raises(ValueError, match="'grad_freeze.freeze_type' must be one of 0, 1, 2, 3, 'auto'"):
        BoostConfig.from_dict(freeze_config(freeze_type=4))
    with pytest.raises(ValueError, match=r"'grad_freeze.seed' must be an int in \[0, "):
        BoostConfig.from_dict({"grad_freeze": {"seed": -1}})


def test_freeze_opt_errors():
    net, _, opt = mlp_setup()
    with pytest.raises(TypeError, match="'opt' must be an Optimizer, but got TanhMLP"):
        FreezeOpt(net)
    with pytest.raises(ValueError, match="'train_parameter_groups' must be given with 'train_strategy'"):
        FreezeOpt(opt, None, [0])
    with pytest.raises(ValueError, match=r"'train_strategy' entry must be an int in \[0, 2\), but got 2"):
        FreezeOpt(opt, [net.trainable_params(), net.trainable_params()[8:]], [0, 2])
    with pytest.raises(ValueError, match="subset of the optimizer's parameters"):
        FreezeOpt(nn.SGD(net.trainable_params()[4:]), [net.trainable_params()])


# ---------------------------------------------------------------- training


@pytest.fixture(scope="module")
def momentum_run():
    """Explicit strategy and a dynamic learning rate; returns per-mode (net, cell, states, indices, batches)."""
    runs = {}

    def run(mode):
        if mode not in runs:
            net, net_with_loss, _ = mlp_setup()
            lrs = [0.1, 0.08, 0.06, 0.05, 0.04, 0.03]
            opt = nn.Momentum(net.trainable_params(), learning_rate=lrs, momentum=0.9)
            groups = GradientFreeze(3, 0, 0.5, 6).split_parameters_groups(net_with_loss, 3)
            cell = BoostTrainOneStepCell(net_with_loss, FreezeOpt(opt, groups, [0, 2, 1, 2, 0, 1]),
                                         boost_config={"level": "O0"})
            states, indices, batches = [state(cell)], [], [data(s) for s in range(6)]
            for inputs in batches:
                indices.append(cell.train_step.current_index())
                cell(*inputs)
                states.append(state(cell))
            runs[mode] = net, cell, states, indices, batches, lrs
        return runs[mode]
    return run


def test_trained_groups_match_numpy(mode, momentum_run):
    """Each step updates exactly its suffix, as NumPy momentum on the suffix with the step's scheduled learning rate
    (the learning-rate schedule counts every update: frozen steps included)."""
    net, _, states, indices, batches, lrs = momentum_run(mode)
    assert indices == [0, 2, 1, 2, 0, 1]
    start = TanhMLP()
    expected = numpy_freeze_run(start, batches, indices, lrs)
    for got, want in zip(net.trainable_params(), expected):
        np.testing.assert_allclose(got.asnumpy(), want, rtol=2e-5, atol=2e-6)
    assert [int(s["global_step"][0]) for s in states] == list(range(7))


def test_frozen_parameters_and_state_bit_identical(mode, momentum_run):
    net, _, states, indices, _, _ = momentum_run(mode)
    names = [p.name for p in net.trainable_params()]
    for before, after, index in zip(states, states[1:], indices):
        for j, name in enumerate(names):
            frozen = j < GROUP_STARTS[index]
            for key in (name, "moments." + name):
                assert np.array_equal(before[key], after[key]) == frozen, (index, key)


def test_adam_state_frozen_and_graphs_per_index(mode):
    """Adam's moments of frozen parameters stay bit-identical; its global counters count every update. One step
    cell (one compiled graph in GRAPH_MODE) per distinct trained-group index, each differentiating only its suffix."""
    net, net_with_loss, opt = mlp_setup("adam")
    cell = BoostTrainOneStepCell(net_with_loss, opt, boost_config=freeze_config(freeze_type=0, freeze_p=0.5))
    assert cell.optimizer.strategy[:4] == (0, 0, 1, 2)
    names = [p.name for p in net.trainable_params()]
    before = state(cell)
    for step in range(4):
        index = cell.train_step.current_index()
        cell(*data(step))
        after = state(cell)
        for j, name in enumerate(names):
            for key in (name, "moment1." + name, "moment2." + name):
                assert np.array_equal(before[key], after[key]) == (j < GROUP_STARTS[index]), (step, key)
        assert not np.array_equal(before["beta1_power"], after["beta1_power"])
        before = after
    steps = cell.train_step.steps
    assert len({id(s) for s in steps}) == 3
    assert [len(s.weights) for s in steps[1:]] == [8, 4]
    plain = BoostTrainOneStepCell(*mlp_setup("adam")[1:], boost_config={"level": "O0"})
    assert sorted(p.name for _, p in cell.parameters_and_names()) == sorted(
        [p.name for _, p in plain.parameters_and_names()] + ["grad_freeze.position"])


class _ProbedMLP(TanhMLP):
    """TanhMLP with a probe between the first two Dense layers whose backward records that it ran."""

    def __init__(self, log):
        super().__init__()
        self.probe = _Probe(log)

    def construct(self, x):
        x = self.act(self.layers[0](x))
        x = self.probe(x)
        for i in range(1, self.depth):
            x = self.layers[i](x)
            if i < self.depth - 1:
                x = self.act(x)
        return x


class _Probe(nn.Cell):
    def __init__(self, log):
        super().__init__()

        def record(dout):
            log.append(1)
            return dout

        self.record = ops.Custom(record, out_shape=lambda s: s, out_dtype=lambda t: t, func_type="pyfunc")

    def construct(self, x):
        return x

    def bprop(self, x, out, dout):
        return (self.record(dout),)


def test_backward_stops_at_first_trained_group(mode):
    """A step that trains from group 1 runs no backward below group 1: the probe's backward (between the first two
    Dense layers, inside group 0's first layer) runs on full steps only."""
    log = []
    net = _ProbedMLP(log)
    opt = nn.SGD(net.trainable_params(), learning_rate=0.1)
    cell = BoostTrainOneStepCell(nn.WithLossCell(net, nn.MSELoss()), opt,
                                 boost_config=freeze_config(freeze_p=0.5))
    counts = []
    for step in range(4):
        cell(*data(step))
        counts.append(len(log))
    assert counts == [1, 2, 2, 2]  # indices 0, 0, 1, 2


def test_freeze_with_accumulation_matches_numpy(mode):
    """Accumulation over 2 micro-steps: every micro-step of a cycle trains the same suffix, the position advances
    once per update, and each update equals a NumPy step on the cycle's mean gradient (the reference crashes)."""
    net, net_with_loss, _ = mlp_setup()
    opt = nn.Momentum(net.trainable_params(), learning_rate=0.1, momentum=0.9)
    cell = BoostTrainOneStepCell(net_with_loss, opt, boost_config=freeze_config(
        freeze_p=0.5, boost={"grad_accumulation": True}, grad_accumulation={"grad_accumulation_step": 2}))
    params = [p.asnumpy().astype(np.float64) for p in net.trainable_params()]
    velocity = [np.zeros_like(p) for p in params]
    indices = []
    for update in range(4):
        index = cell.train_step.current_index()
        grads = []
        for micro in range(2):
            assert cell.train_step.current_index() == index
            x, y = data(10 * update + micro, n=4)
            cell(x, y)
            grads.append(numpy_mlp_grads(params, x.asnumpy().astype(np.float64), y.asnumpy().astype(np.float64)))
        for j in range(GROUP_STARTS[index], len(params)):
            velocity[j] = 0.9 * velocity[j] + (grads[0][j] + grads[1][j]) / 2
            params[j] = params[j] - 0.1 * velocity[j]
        indices.append(index)
    assert indices == [0, 0, 1, 2]
    for got, want in zip(net.trainable_params(), params):
        np.testing.assert_allclose(got.asnumpy(), want, rtol=2e-5, atol=2e-6)
    assert all(not g.asnumpy().any() for g in cell.update.grad_sums)


def test_freeze_with_loss_scale_planted_overflow(mode):
    """An overflowing frozen step changes no weight, no optimizer state and not the schedule position; the scale
    drops; afterwards the run equals a control run that never saw the poisoned batch. (2 groups: 0, 1, 0, 1, ...)"""
    def make():
        net, net_with_loss, opt = mlp_setup()
        return net, BoostTrainOneStepWithLossScaleCell(net_with_loss, opt, DynamicLossScaleUpdate(2.0 ** 10, window=50),
                                                       boost_config=freeze_config(param_groups=2, freeze_p=0.5))
    net, cell = make()
    control_net, control = make()
    cell(*data(0))
    control(*data(0))
    assert cell.train_step.current_index() == 1
    before = state(cell)
    x, y = data(1)
    poisoned = y.asnumpy()
    poisoned[0, 0] = np.inf
    _, overflow, scale = cell(x, Tensor(poisoned))
    assert bool(overflow.asnumpy()) and float(scale.asnumpy()) == 2.0 ** 9
    after = state(cell)
    changed = [k for k in before if not np.array_equal(before[k], after[k])]
    assert sorted(changed) == ["loss_scale.clean_steps", "scale_sense"]  # only the loss-scale policy's state
    assert cell.train_step.current_index() == 1
    for step in range(1, 3):
        cell(*data(step))
        control(*data(step))
    for got, want in zip(net.trainable_params(), control_net.trainable_params()):
        np.testing.assert_allclose(got.asnumpy(), want.asnumpy(), rtol=1e-6, atol=1e-7)


def test_resume_continues_the_sequence(tmp_path):
    """The position checkpoints with the train cell; the user's parameter names load strictly into the plain net.
    (PYNATIVE_MODE only: nothing here depends on the mode.)"""
    ms.set_context(mode=ms.PYNATIVE_MODE, device_target="CPU")
    config = freeze_config(freeze_type=1, freeze_p=0.5, total_steps=20)
    _, net_with_loss, opt = mlp_setup()
    cell = BoostTrainOneStepCell(net_with_loss, opt, boost_config=config)
    for step in range(5):
        cell(*data(step))
    path = str(tmp_path / "freeze.ckpt")
    ms.save_checkpoint(cell, path)
    upcoming = list(cell.optimizer.strategy[5:8])
    net2, net_with_loss2, opt2 = mlp_setup()
    resumed = BoostTrainOneStepCell(net_with_loss2, opt2, boost_config=config)
    assert not ms.load_param_into_net(resumed, ms.load_checkpoint(path), strict_load=True)[0]
    seen = []
    for step in range(5, 8):
        seen.append(resumed.train_step.current_index())
        resumed(*data(step))
        cell(*data(step))
    assert seen == upcoming
    for got, want in zip(net2.trainable_params(), cell.network.trainable_params()):
        np.testing.assert_array_equal(got.asnumpy(), want.asnumpy())
    plain = TanhMLP(seed=1)
    params = {n: p for n, p in ms.load_checkpoint(path).items() if n.startswith("layers.")}
    assert not ms.load_param_into_net(plain, params, strict_load=True)[0]


def test_frozen_for_good_query():
    """A progressive schedule reports its rising index as frozen for good; a cyclic one its strategy's minimum."""
    ms.set_context(mode=ms.PYNATIVE_MODE, device_target="CPU")
    _, net_with_loss, opt = mlp_setup()
    cell = BoostTrainOneStepCell(net_with_loss, opt, boost_config=freeze_config(freeze_type=2, freeze_p=0.25,
                                                                                total_steps=4))
    assert cell.optimizer.strategy == (0, 1, 1, 2)
    seen = []
    for step in range(5):
        seen.append((cell.train_step.current_index(), cell.train_step.frozen_for_good()))
        cell(*data(step))
    assert seen == [(0, 0), (1, 1), (1, 1), (2, 2), (2, 2)]  # the last index holds
    cyclic = FreezeOpt(opt, [net_with_loss.trainable_params(), net_with_loss.trainable_params()[4:]], [1, 1, 0])
    assert BoostTrainOneStepCell(net_with_loss, cyclic).train_step.frozen_for_good() == 0


class _ConvBNNet(nn.Cell):
    """conv+BatchNorm twice and a Dense head on 1x8x8 images: 3 layers by the reference's rule."""

    def __init__(self):
        super().__init__()
        ms.set_seed(0)
        self.conv1 = nn.Conv2d(1, 16, 3, pad_mode="same", has_bias=False)
        self.bn1 = nn.BatchNorm2d(16)
        self.conv2 = nn.Conv2d(16, 16, 3, stride=2, pad_mode="same", has_bias=False)
        self.bn2 = nn.BatchNorm2d(16)
        self.relu = nn.ReLU()
        self.flatten = nn.Flatten()
        self.fc = nn.Dense(256, 10)

    def construct(self, x):
        x = self.relu(self.bn1(self.conv1(x)))
        return self.fc(self.flatten(self.relu(self.bn2(self.conv2(x)))))


def test_o1_and_lars(graph_mode):
    """O1 (LessBN's rebuilt, centralizing optimizer, then freezing) through build_train_network: a frozen step
    leaves the front and its state alone, and the suffix optimizer keeps its parameters' centralization flags.
    LARS (its LARSUpdate op has no CPU kernel, so checked by structure only): the suffix LARS wraps a suffix
    optimizer whose state is the user's inner optimizer's."""
    rng = np.random.RandomState(0)
    x, y = Tensor(rng.rand(8, 1, 8, 8).astype(np.float32)), Tensor(rng.randint(0, 10, 8).astype(np.int32))
    loss = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")
    net = _ConvBNNet()
    config = {"level": "O1", "grad_freeze": {"param_groups": 2, "freeze_type": 0, "freeze_p": 0.5}}
    cell = build_train_network(nn.WithLossCell(net, loss), nn.Momentum(net.trainable_params(), 0.05, 0.9), config)
    base, suffix = cell.optimizer.optimizer, cell.optimizer.opts[1]
    position = {id(p): i for i, p in enumerate(base.parameters)}
    assert suffix.grad_centralization_flags == tuple(base.grad_centralization_flags[position[id(p)]]
                                                     for p in suffix.parameters)
    assert sorted(p.name for p in suffix.parameters) == ["bn2.beta", "bn2.gamma", "conv2.weight", "fc.multiplier",
                                                         "fc.weight"]  # 3 layers: conv1+bn1 is frozen
    cell.set_train()
    cell(x, y)
    before = state(cell)
    assert cell.train_step.current_index() == 1
    cell(x, y)
    changed = {k for k in before if not np.array_equal(before[k], state(cell)[k])}
    assert not any(k.endswith(("conv1.weight", "bn1.gamma", "bn1.beta")) for k in changed), changed
    assert {"conv2.weight", "moments.conv2.weight", "bn2.gamma", "fc.weight", "moments.fc.weight", "global_step",
            "grad_freeze.position"} <= changed
    lars_net = _ConvBNNet()
    lars = nn.LARS(nn.Momentum(lars_net.trainable_params(), 0.05, 0.9), coefficient=0.01)
    groups = GradientFreeze(2, 0, 0.5, 10).split_parameters_groups(lars_net, 2)
    suffix = FreezeOpt(lars, groups).opts[1]
    assert isinstance(suffix, nn.LARS) and [p.name for p in suffix.parameters] == [p.name for p in groups[1]]
    assert all(mine is lars.opt.moments[position] for mine, position in zip(suffix.opt.moments, range(3, 8)))
    assert suffix.opt.global_step is lars.opt.global_step and suffix.global_step is lars.global_step


def test_entry_points():
    """build_train_network and AutoBoost.network_auto_process_train freeze from the config; freeze_cell gives one
    step per group, also with accumulation. (PYNATIVE_MODE only: wiring, not numerics.)"""
    ms.set_context(mode=ms.PYNATIVE_MODE, device_target="CPU")
    config = freeze_config(freeze_p=0.5)
    net, net_with_loss, opt = mlp_setup()
    cell = build_train_network(net_with_loss, opt, config)
    assert isinstance(cell.optimizer, FreezeOpt) and cell.optimizer.strategy[:4] == (0, 0, 1, 2)
    boost = AutoBoost("O0", config)
    network, freeze_opt = boost.network_auto_process_train(net_with_loss, nn.SGD(net.trainable_params(), 0.1))
    assert network is net_with_loss and isinstance(freeze_opt, FreezeOpt)
    assert [len(o.parameters) for o in freeze_opt.opts] == [12, 8, 4]
    cell = BoostTrainOneStepCell(network, freeze_opt)
    cell.set_train()
    start = state(cell)
    for step in range(3):
        cell(*data(step))
    assert cell.train_step.steps[1].training  # the twin that ran follows set_train
    assert np.array_equal(start["layers.0.weight"], state(cell)["layers.0.weight"]) is False
    cells = freeze_cell(False, network, freeze_opt, 1.0, None, True, max_accumulation_step=2)
    assert len(cells) == 3 and cells[2].step.update.grad_sums[0] is cells[0].step.update.grad_sums[8]
    before = state(cells[0])
    for step in range(2):
        cells[2](*data(step))
    after = state(cells[0])
    changed = sorted(k for k in before if not np.array_equal(before[k], after[k]))
    assert changed == ["global_step"] + sorted(f"layers.{i}.{w}" for i in (4, 5) for w in ("bias", "weight"))
    AutoBoost("O0", "")


def test_gradient_freeze_refuses_a_seed_numpy_cannot_take():
    """Regression, found by building accepted configs: seed 2**40 passed and the schedule failed with numpy's "Seed
    must be between 0 and 2**32 - 1", not naming the argument."""
    with pytest.raises(ValueError, match="'seed' must be an int in \\[0, 4294967295\\]"):
        GradientFreeze(2, 1, 0.5, 10, 2 ** 40)
