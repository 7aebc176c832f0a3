"""Planted faults (Hypothesis): non-finite values at random steps, in random tensors, for every loss-scaled cell.

A fault is an inf, -inf or nan planted, at a step Hypothesis picks, in one of:
- an input (``x``) or a label (``y``): the loss and the gradients turn non-finite (an inf input reaches only the
  first layer's weight gradient: tanh saturates after it);
- the gradient flowing back out of Dense layer ``k`` (an identity cell whose backward multiplies by the planted
  value): the weight gradients of layers ``0..k`` turn non-finite, the loss stays finite;
- the loss alone (``loss + stop_gradient(value)``): the loss is non-finite, the gradients are not, so the step is
  clean and must update.

For each cell (plain dynamic and log2 scales, accumulation, freezing, a GroupLossScaleManager, the GAN cell with a
scale per pair and with one shared decision, DimReduce) the properties are: the overflow flags are exactly the
steps whose trained gradients were non-finite (worked out from where the fault sits, which layers a freezing step
trains and which group a layer is in); no Parameter ever holds a non-finite value; every Parameter but the loss
scale ends bit-identical to a control cell that was given only the clean steps; and the scale (each group's, each
pair's) follows its policy exactly, step by step, against a NumPy rendering of it. Cells are built once per kind
and reset between examples; GRAPH_MODE. Replicas across ranks: tests/test_distributed.py plants faults on random
ranks in its msrun jobs.
"""
import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from mindspore import Tensor, nn, ops

from boost_cells import (BoostTrainOneStepWithLossScaleCell, DynamicLossScaleUpdate, GroupLossScaleManager,
                         Log2LossScaleUpdate, MultiOptimizerTrainOneStepCell)
from tests import figures
from tests.conftest import examples
from tests.helpers import numpy_dynamic

pytestmark = pytest.mark.slow  # Hypothesis properties: a train cell run on every generated fault plan

DIMS = (4, 5, 5, 5, 3)      # 4 Dense layers; the reference's layer rule makes 2 freezing layers of 2 each
DEPTH = len(DIMS) - 1
HALF = DEPTH // 2
ALL = frozenset(range(DEPTH))
STEPS = 7
BATCH = 8
# Powers of two: an unscaled gradient is then exactly the unscaled one at any scale, so the control run (other
# scales on other steps) can be compared bit for bit.
DYNAMIC = dict(loss_scale_value=2.0 ** 10, factor=2.0, window=2, min_scale=2.0 ** 8, max_scale=2.0 ** 12,
               hysteresis=2)
LOG2 = dict(loss_scale_value=2.0 ** 10, inc=1.0, dec=1.0, min_scale=2.0 ** 8, max_scale=2.0 ** 12)  # whole log2 steps
GROUP = dict(scale_factor=2.0, scale_window=2, min_scale=2.0 ** 8, max_scale=2.0 ** 12)
SCALE_STATE = re.compile(r"^(pair\d+\.)?(scale_sense|loss_scale\.|group_loss_scale\.)")


class Poison(nn.Cell):
    """Identity forward; the backward pass multiplies the gradient by ``gain`` (1, or the planted value)."""

    def construct(self, x, gain):
        return x

    def bprop(self, x, gain, out, dout):
        return dout * gain, ops.zeros_like(gain)


class PoisonMLP(nn.Cell):
    """Dense layers with tanh between them (as tests.helpers.TanhMLP), a Poison after each; optionally a
    GroupLossScaleManager between its two halves (groups: Dense 0-1 and Dense 2-3)."""

    def __init__(self, seed=0, manager=None):
        super().__init__()
        rng = np.random.RandomState(seed)
        self.layers = nn.CellList([
            nn.Dense(a, b, weight_init=Tensor(rng.randn(b, a).astype(np.float32) * 0.5),
                     bias_init=Tensor(rng.randn(b).astype(np.float32) * 0.1))
            for a, b in zip(DIMS[:-1], DIMS[1:])])
        self.poison = Poison()
        self.manager = manager

    def construct(self, x, gains):
        if self.manager is not None:
            x = self.manager(x, 0, 1)
        for i in range(DEPTH):
            x = self.layers[i](x)
            if i < DEPTH - 1:
                x = ops.tanh(x)
            x = self.poison(x, gains[i])
            if self.manager is not None and i == HALF - 1:
                x = self.manager(x, 1, 2)
        if self.manager is not None:
            x = self.manager(x, 2, 3)
        return x


class PoisonLoss(nn.Cell):
    """mean((net(x) - y)^2) + stop_gradient(loss_poison); inputs (x, y, gains, loss_poison)."""

    def __init__(self, net):
        super().__init__(auto_prefix=False)
        self.net = net

    def construct(self, x, y, gains, loss_poison):
        return ((self.net(x, gains) - y) ** 2).mean() + ops.stop_gradient(loss_poison)


class PairLoss(nn.Cell):
    """One GAN-cell pair: PoisonLoss of ``net`` reading its own gains; inputs (x, y, gains0, gains1, poison)."""

    def __init__(self, net, index):
        super().__init__(auto_prefix=False)
        self.loss = PoisonLoss(net)
        self.index = index

    def construct(self, x, y, gains0, gains1, loss_poison):
        return self.loss(x, y, gains0 if self.index == 0 else gains1, loss_poison)


def renamed(net, prefix):
    net.update_parameters_name(prefix)
    return net


# --- the cells ----------------------------------------------------------------------------------------------------

def single(kind, tmp_path):
    """A loss-scaled cell of ``kind`` over a fresh PoisonMLP; returns (cell, extras)."""
    manager = GroupLossScaleManager(2.0 ** 10, [], **GROUP) if kind == "group" else None
    net = PoisonMLP(manager=manager)
    opt = nn.Momentum(net.trainable_params(), 0.05, 0.9)
    config, policy = {"level": "O0"}, DynamicLossScaleUpdate(**DYNAMIC)
    if kind == "log2":
        policy = Log2LossScaleUpdate(**LOG2)
    elif kind == "accumulation":
        config = {"boost": {"mode": "manual", "grad_accumulation": True},
                  "grad_accumulation": {"grad_accumulation_step": 3}}
    elif kind == "freeze":   # continuous schedule [0, 1] over the 2 freezing layers
        config = {"boost": {"mode": "manual", "grad_freeze": True},
                  "grad_freeze": {"param_groups": 2, "freeze_type": 0, "freeze_p": 0.5, "total_steps": 16}}
    elif kind == "group":
        params = net.trainable_params()
        manager.loss_scale_groups = [params[:2 * HALF], params[2 * HALF:]]
        policy = manager
    elif kind == "dim_reduce":
        size = sum(int(np.prod(p.shape)) for p in net.trainable_params())
        basis, _ = np.linalg.qr(np.random.RandomState(1).randn(size, 3))
        np.save(tmp_path / "pca.npy", basis.T.astype(np.float32))
        config = {"boost": {"mode": "manual", "dim_reduce": True},
                  "dim_reduce": {"pca_mat_path": str(tmp_path / "pca.npy"), "n_components": 3}}
    return BoostTrainOneStepWithLossScaleCell(PoisonLoss(net), opt, policy, boost_config=config), manager


def multi(shared):
    nets = [renamed(PoisonMLP(seed=i), f"p{i}.") for i in range(2)]
    pairs = [(PairLoss(net, i), nn.Momentum(net.trainable_params(), 0.05, 0.9)) for i, net in enumerate(nets)]
    scales = DynamicLossScaleUpdate(**DYNAMIC) if shared else [DynamicLossScaleUpdate(**DYNAMIC),
                                                               DynamicLossScaleUpdate(**DYNAMIC, prefix="scale1")]
    return MultiOptimizerTrainOneStepCell(pairs, scales, shared_overflow=shared)


def parameters(cell):
    """Every Parameter of ``cell`` by its name (the checkpoint's)."""
    return {param.name: param for param in cell.get_parameters()}


class Fixture:
    """The cell under test, built once (one compile) and reset to its first state before every run. The control run
    is the same cell, reset and given only the clean steps; for the GAN cell with a decision per pair, where no
    run of it can skip one pair and step the other by design, the control is each pair's own train cell."""

    def __init__(self, kind, tmp_path):
        self.kind = kind
        if kind in ("multi", "multi_shared"):
            self.cell = multi(kind == "multi_shared")
            self.manager = None
            self.pairs = [single_pair(i) for i in range(2)] if kind == "multi" else []
        else:
            self.cell, self.manager = single(kind, tmp_path)
            self.pairs = []
        self.cells = [self.cell, *self.pairs]
        self.initial = [{name: p.asnumpy().copy() for name, p in parameters(c).items()} for c in self.cells]

    def reset(self):
        for cell, state in zip(self.cells, self.initial):
            for name, param in parameters(cell).items():
                ops.assign(param, Tensor(state[name]))

    def snapshot(self):
        return {name: p.asnumpy().copy() for name, p in parameters(self.cell).items()}


def single_pair(index):
    net = renamed(PoisonMLP(seed=index), f"p{index}.")
    return BoostTrainOneStepWithLossScaleCell(PairLoss(net, index), nn.Momentum(net.trainable_params(), 0.05, 0.9),
                                              Tensor(np.float32(2.0 ** 10)))


# --- faults and what they must do ----------------------------------------------------------------------------------

VALUES = [np.inf, -np.inf, np.nan]


@st.composite
def plans(draw, kind):
    """One fault or None per step: (site, value, where)."""
    sites = ["x", "y", "grad", "loss"]
    plan = []
    for _ in range(STEPS):
        if draw(st.integers(0, 2)) == 0:
            plan.append(None)
            continue
        site = draw(st.sampled_from(sites))
        where = draw(st.integers(0, DEPTH - 1)) if site == "grad" else draw(st.integers(0, BATCH * 4 - 1))
        pair = draw(st.integers(0, 1)) if kind.startswith("multi") else 0
        plan.append((site, draw(st.sampled_from(VALUES)), where, pair))
    return plan


def bad_layers(fault, pair=0):
    """The Dense layers whose weight gradients the fault makes non-finite (of ``pair``'s network)."""
    if fault is None:
        return frozenset()
    site, value, where, fault_pair = fault
    if site == "x":
        return ALL if np.isnan(value) else frozenset({0})
    if site == "y":
        return ALL
    if site == "grad":
        return frozenset(range(where + 1)) if fault_pair == pair else frozenset()
    return frozenset()


def inputs(step, fault):
    rng = np.random.RandomState(100 + step)
    x = rng.randn(BATCH, DIMS[0]).astype(np.float32)
    y = rng.randn(BATCH, DIMS[-1]).astype(np.float32)
    gains = [np.ones(DEPTH, np.float32), np.ones(DEPTH, np.float32)]
    poison = np.float32(0)
    if fault is not None:
        site, value, where, pair = fault
        if site == "x":
            x.reshape(-1)[where % x.size] = value
        elif site == "y":
            y.reshape(-1)[where % y.size] = value
        elif site == "grad":
            gains[pair][where] = value
        else:
            poison = np.float32(value)
    return x, y, gains, poison


def numpy_log2(flags, loss_scale_value, inc, dec, min_scale, max_scale):
    """tflib's log2 policy in float32: the log2 of the scale after each step."""
    log2 = np.float32(np.log2(loss_scale_value))
    out = []
    for flag in flags:
        log2 = np.float32(np.clip(np.float32(log2 + np.float32(-dec if flag else inc)), np.log2(min_scale),
                                  np.log2(max_scale)))
        out.append(log2)
    return out


def assert_finite(cell, when):
    for name, param in parameters(cell).items():
        value = param.asnumpy()
        if value.dtype.kind == "f":
            assert np.all(np.isfinite(value)), f"{name} holds a non-finite value {when}"


def check_single(fixture, plan):
    cell = fixture.cell
    flags, scales, groups, expected, log2, clean = [], [], [], [], [], []
    for step, fault in enumerate(plan):
        bad = bad_layers(fault)
        trained = ALL
        if fixture.kind == "freeze":
            trained = frozenset(range(2 * cell.train_step.current_index(), DEPTH))
        x, y, gains, poison = inputs(step, fault)
        args = (Tensor(x), Tensor(y), Tensor(gains[0]), Tensor(poison))
        _, overflow, scale = cell(*args)
        flags.append(bool(overflow.asnumpy()))
        scales.append(np.float32(scale.asnumpy().reshape(-1)[0]))
        if fixture.kind == "group":
            groups.append(fixture.manager.scales.asnumpy().copy())
            expected.append([bool(bad & set(range(HALF))), bool(bad & set(range(HALF, DEPTH)))])
        else:
            expected.append(bool(bad & trained))
        if fixture.kind == "log2":
            log2.append(np.float32(parameters(cell)["loss_scale.log2"].asnumpy()))
        assert_finite(cell, f"after step {step} ({fault})")
        if not flags[-1]:
            clean.append(args)
    faulted = fixture.snapshot()
    fixture.reset()
    for args in clean:
        cell(*args)
    compare(faulted, fixture.snapshot())
    if fixture.kind == "group":
        assert flags == [any(e) for e in expected], (flags, expected)
        want = numpy_dynamic(expected, [2.0 ** 10] * 2, GROUP["scale_factor"], GROUP["scale_window"],
                             GROUP["min_scale"], GROUP["max_scale"])
        np.testing.assert_array_equal(np.array(groups), np.array(want))
    else:
        assert flags == expected, (flags, expected)
        if fixture.kind == "log2":
            np.testing.assert_array_equal(np.array(log2), np.array(numpy_log2(flags, **LOG2)))
            np.testing.assert_allclose(scales, np.exp2(np.array(log2, np.float64)), rtol=2 ** -23)
        else:
            want = numpy_dynamic(flags, DYNAMIC["loss_scale_value"], DYNAMIC["factor"], DYNAMIC["window"],
                                 DYNAMIC["min_scale"], DYNAMIC["max_scale"], DYNAMIC["hysteresis"])
            np.testing.assert_array_equal(np.array(scales), np.array(want).reshape(-1))


def check_multi(fixture, plan):
    cell, shared = fixture.cell, fixture.kind == "multi_shared"
    flags, scales, expected, clean = [], [], [], []
    for step, fault in enumerate(plan):
        x, y, gains, poison = inputs(step, fault)
        args = (Tensor(x), Tensor(y), Tensor(gains[0]), Tensor(gains[1]), Tensor(poison))
        _, overflows, step_scales = cell(*args)
        flags.append([bool(o.asnumpy()) for o in overflows])
        scales.append([np.float32(s.asnumpy().reshape(-1)[0]) for s in step_scales])
        expected.append([bool(bad_layers(fault, pair)) for pair in range(2)])
        assert_finite(cell, f"after step {step} ({fault})")
        if shared and not any(flags[-1]):
            clean.append(args)
        elif not shared:
            for pair in range(2):
                if not flags[-1][pair]:
                    fixture.pairs[pair](*args)
    assert flags == expected, (flags, expected)
    decisions = [[any(f)] * 2 for f in flags] if shared else flags
    want = numpy_dynamic(decisions, [DYNAMIC["loss_scale_value"]] * 2, DYNAMIC["factor"], DYNAMIC["window"],
                         DYNAMIC["min_scale"], DYNAMIC["max_scale"], DYNAMIC["hysteresis"])
    np.testing.assert_array_equal(np.array(scales), np.array(want))
    faulted = fixture.snapshot()
    if shared:
        fixture.reset()
        for args in clean:
            cell(*args)
        compare(faulted, fixture.snapshot())
    else:   # weights and moments: the names the networks and their optimizers give them
        mine = {name: v for name, v in faulted.items() if re.match(r"^(moments\.)?p\d\.", name)}
        theirs = {}
        for control in fixture.pairs:
            theirs.update({name: p.asnumpy() for name, p in parameters(control).items()
                           if re.match(r"^(moments\.)?p\d\.", name)})
        assert mine.keys() == theirs.keys() and mine
        compare(mine, theirs)


def compare(mine, theirs):
    """Every Parameter but the loss-scale state (name -> array), bit for bit."""
    names = [name for name in mine if not SCALE_STATE.match(name)]
    assert names and set(names) <= set(theirs)
    for name in names:
        np.testing.assert_array_equal(mine[name], theirs[name], err_msg=name)


KINDS = ["plain", "log2", "accumulation", "freeze", "group", "multi", "multi_shared", "dim_reduce"]


@pytest.mark.parametrize("kind", KINDS)
def test_planted_faults_never_reach_the_state_and_the_scale_follows_its_policy(graph_mode, tmp_path, kind):
    fixture = Fixture(kind, tmp_path)
    check = check_multi if kind.startswith("multi") else check_single

    @settings(max_examples=examples(10))
    @given(plan=plans(kind))
    def planted(plan):
        fixture.reset()
        check(fixture, plan)
        figures.add("planted faults, in-process: steps run", len(plan))
        figures.add("planted faults, in-process: faults planted", sum(fault is not None for fault in plan))
    planted()
