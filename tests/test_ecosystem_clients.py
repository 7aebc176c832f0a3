"""The two libraries that build their train steps on ``mindspore.boost``'s accumulation pieces run on boost_cells by
changing the import, each pattern reproduced small in this file's own code on the Linear net:

- MindCV (``mindcv/utils/train_step.py``): ``TrainStep(nn.TrainOneStepWithLossScaleCell)`` holds a
  ``GradientAccumulation`` subclass that sets ``self.grad_reducer`` and drives the base's ``_max_accumulation_step``,
  ``_grad_accumulation``, ``_accumulation_step``, ``optimizer`` and ``hyper_map`` through the two ops of
  ``grad_accumulation`` in its own ``construct``.
- MindOne (``mindone/trainers/train_step.py``): ``TrainOneStepWrapper(nn.TrainOneStepWithLossScaleCell)`` keeps its
  own buffers and counter and applies the two ops through ``HyperMap``, partially applied.

Each pattern is built on a package, ``mindspore.boost`` or ``boost_cells``, reached as ``package.grad_accumulation``
and ``package.GradientAccumulation``, the names the clients import. Both clients' train steps subclass MindSpore's own
``nn.TrainOneStepWithLossScaleCell``, whose ``get_overflow_status`` runs the Ascend-only ``NPUGetFloatStatusV2`` on
CPU whatever the package: MindCV's branch with a loss-scale manager cannot run here, so its Tensor ``scale_sense``
branch is reproduced, and MindOne's CPU path, which skips the check. Every run is checked against NumPy (each update
equals one step on the big batch of its k micro-batches; after each micro-step the counter is i mod k and the
buffers hold the running sum of grad / k, zero after the update), and the two packages' runs against each other,
bit for bit.
"""
import mindspore as ms
import mindspore.boost
import numpy as np
import pytest
from mindspore import Parameter, Tensor, nn, ops
from mindspore.common import dtype as mstype
from mindspore.ops import functional as F

import boost_cells
from boost_cells.mindspore_internals import reset_pynative_executor
from tests.helpers import NumpyOptimizer, batch, linear_setup, numpy_mse_grads

K = 3
CYCLES = 2
LR, MOMENTUM = 0.1, 0.9
PACKAGES = {"mindspore.boost": mindspore.boost, "boost_cells": boost_cells}

_unscale = ops.MultitypeFuncGraph("unscale")


@_unscale.register("Tensor", "Tensor")
def _unscale_tensor(scale, grad):
    return grad * F.cast(ops.reciprocal(scale), F.dtype(grad))


def mindcv_train_step(package, network_with_loss, optimizer):
    """MindCV's ``TrainStep`` with accumulation over ``K`` micro-steps and a Tensor ``scale_sense`` (its branch
    without a loss-scale manager; no EMA, no clipping), on ``package``. Returns the step and its accumulation's
    buffers (``_grad_accumulation``) and counter (``_accumulation_step``)."""
    accumulate = package.grad_accumulation.gradient_accumulation_op
    clear = package.grad_accumulation.gradient_clear_op

    class GradientAccumulation(package.GradientAccumulation):
        """Reduces once per cycle with the reducer it is given; asks the optimizer for its learning rate on the
        other micro-steps (MindCV's two changes to the base)."""

        def __init__(self, max_accumulation_step, optimizer, grad_reducer):
            super().__init__(max_accumulation_step, optimizer)
            self.grad_reducer = grad_reducer

        def construct(self, loss, grads):
            loss = F.depend(loss, self.hyper_map(F.partial(accumulate, self._max_accumulation_step),
                                                 self._grad_accumulation, grads))
            self._accumulation_step += 1
            if self._accumulation_step >= self._max_accumulation_step:
                loss = F.depend(loss, self.optimizer(self.grad_reducer(self._grad_accumulation)))
                loss = F.depend(loss, self.hyper_map(F.partial(clear), self._grad_accumulation))
                self._accumulation_step = 0
            else:
                loss = F.depend(loss, self.optimizer.get_lr())
            return loss

    class TrainStep(nn.TrainOneStepWithLossScaleCell):
        def __init__(self, network, optimizer, scale_sense):
            super().__init__(network, optimizer, scale_sense)
            self.gradient_accumulation = GradientAccumulation(K, optimizer, self.grad_reducer)

        def construct(self, *inputs):
            loss = self.network(*inputs)
            _, scaling_sens = self.start_overflow_check(loss, self.scale_sense)
            sens = ops.ones_like(loss) * F.cast(scaling_sens, F.dtype(loss))
            grads = self.grad(self.network, self.weights)(*inputs, sens)
            grads = self.hyper_map(F.partial(_unscale, scaling_sens), grads)
            return self.gradient_accumulation(loss, grads)

    step = TrainStep(network_with_loss, optimizer, Tensor(4.0, mstype.float32))
    accumulation = step.gradient_accumulation
    return step, accumulation._grad_accumulation, accumulation._accumulation_step


def mindone_train_step(package, network_with_loss, optimizer):
    """MindOne's ``TrainOneStepWrapper`` with accumulation over ``K`` micro-steps, as it runs on CPU (no overflow
    check: it sets ``overflow`` False there) with a Tensor ``scale_sense``, on ``package``. Returns the step, its
    buffers and its counter."""
    accumulate = package.grad_accumulation.gradient_accumulation_op
    clear = package.grad_accumulation.gradient_clear_op

    class TrainOneStepWrapper(nn.TrainOneStepWithLossScaleCell):
        def __init__(self, network, optimizer, scale_sense):
            super().__init__(network, optimizer, scale_sense)
            self.accum_steps = K
            self.accumulated_grads = optimizer.parameters.clone(prefix="grad_accumulated_", init="zeros")
            self.cur_accum_step = Parameter(Tensor(0, ms.int32), name="accum_step")
            self.zero = Tensor(0, ms.int32)

        def construct(self, *inputs):
            loss = self.network(*inputs)
            scaling_sens = self.scale_sense
            sens = ops.ones_like(loss) * F.cast(scaling_sens, F.dtype(loss))
            grads = self.grad(self.network, self.weights)(*inputs, sens)
            grads = self.hyper_map(F.partial(_unscale, scaling_sens), grads)
            loss = F.depend(loss, self.hyper_map(F.partial(accumulate, self.accum_steps), self.accumulated_grads,
                                                 grads))
            loss = F.depend(loss, ops.assign_add(self.cur_accum_step, Tensor(1, ms.int32)))
            if self.cur_accum_step >= self.accum_steps:
                loss = F.depend(loss, self.optimizer(self.grad_reducer(self.accumulated_grads)))
                loss = F.depend(loss, self.hyper_map(F.partial(clear), self.accumulated_grads))
                loss = F.depend(loss, ops.assign(self.cur_accum_step, self.zero))
            else:
                loss = F.depend(loss, self.optimizer.get_lr())
            return loss, Tensor(False), scaling_sens

    step = TrainOneStepWrapper(network_with_loss, optimizer, Tensor(4.0, mstype.float32))
    return step, step.accumulated_grads, step.cur_accum_step


PATTERNS = {"mindcv": mindcv_train_step, "mindone": mindone_train_step}


def micro_batches():
    """``CYCLES * K`` micro-batches of 2 rows: cycle c's are the rows of big batch c, split in K."""
    return [tuple(rows) for seed in range(CYCLES)
            for rows in zip(*(np.split(a, K) for a in batch(n=2 * K, seed=seed)))]


def run(pattern, package):
    """Train the pattern on ``package`` over ``micro_batches()``: per micro-step, the counter and a copy of the
    buffers; then the weights."""
    net, network_with_loss, optimizer = linear_setup("momentum", lr=LR, momentum=MOMENTUM)
    step, buffers, counter = PATTERNS[pattern](package, network_with_loss, optimizer)
    trajectory = []
    for x, y in micro_batches():
        step(Tensor(x), Tensor(y))
        trajectory.append((int(counter.asnumpy()), [b.asnumpy().copy() for b in buffers]))
    return trajectory, [p.asnumpy() for p in net.trainable_params()]


def numpy_run():
    """What ``run`` should give, in float64: the buffers from the micro-batches' gradients, the weights from one
    step per big batch."""
    params = [p.asnumpy().astype(np.float64) for p in linear_setup()[0].trainable_params()]
    optimizer = NumpyOptimizer(LR, MOMENTUM)
    trajectory, buffers = [], [np.zeros_like(p) for p in params]
    for i, (x, y) in enumerate(micro_batches(), 1):
        buffers = [b + g / K for b, g in zip(buffers, numpy_mse_grads(*params, x, y))]
        if i % K == 0:
            x_big, y_big = batch(n=2 * K, seed=i // K - 1)
            params = optimizer.step(params, numpy_mse_grads(*params, x_big, y_big))
            buffers = [np.zeros_like(b) for b in buffers]
        trajectory.append((i % K, buffers))
    return trajectory, params


@pytest.fixture(scope="module")
def expected():
    return numpy_run()


def check_against_numpy(got, expected):
    (trajectory, weights), (want_trajectory, want_weights) = got, expected
    assert [counter for counter, _ in trajectory] == [counter for counter, _ in want_trajectory]
    assert [counter for counter, _ in trajectory] == [1, 2, 0] * CYCLES
    for (_, buffers), (_, want) in zip(trajectory, want_trajectory):
        for buffer, value in zip(buffers, want):
            np.testing.assert_allclose(buffer, value, rtol=1e-5, atol=1e-7)
    for weight, value in zip(weights, want_weights):
        np.testing.assert_allclose(weight, value, rtol=1e-5, atol=1e-6)


def check_identical(first, second):
    (trajectory, weights), (other_trajectory, other_weights) = first, second
    assert [counter for counter, _ in trajectory] == [counter for counter, _ in other_trajectory]
    for (_, buffers), (_, other) in zip(trajectory, other_trajectory):
        for buffer, value in zip(buffers, other):
            np.testing.assert_array_equal(buffer, value)
    for weight, value in zip(weights, other_weights):
        np.testing.assert_array_equal(weight, value)


def test_mindcv_pattern_matches_numpy_and_the_reference(graph_mode, expected):
    """GRAPH_MODE only: under PYNATIVE_MODE MindCV's subclass cannot run on either package (its
    ``self._accumulation_step = 0`` assigns an int to a Parameter attribute, which ``nn.Cell`` refuses outside a
    graph; ``test_mindcv_pattern_fails_alike_in_pynative``)."""
    runs = {name: run("mindcv", package) for name, package in PACKAGES.items()}
    check_against_numpy(runs["boost_cells"], expected)
    check_identical(runs["boost_cells"], runs["mindspore.boost"])


def test_mindcv_pattern_fails_alike_in_pynative():
    """The client's own code, not the base class, fails in PyNative: the same error on both packages, at the first
    update."""
    messages = set()
    for package in PACKAGES.values():
        reset_pynative_executor()  # the failed step leaves a grad graph open
        _, network_with_loss, optimizer = linear_setup("momentum", lr=LR, momentum=MOMENTUM)
        step = mindcv_train_step(package, network_with_loss, optimizer)[0]
        data = micro_batches()
        for x, y in data[:K - 1]:
            step(Tensor(x), Tensor(y))
        with pytest.raises(TypeError, match="Parameter '_accumulation_step' already exists") as error:
            step(*(Tensor(a) for a in data[K - 1]))
        messages.add(str(error.value))
    assert len(messages) == 1


def test_mindone_pattern_matches_numpy_and_the_reference(mode, expected):
    runs = {name: run("mindone", package) for name, package in PACKAGES.items()}
    check_against_numpy(runs["boost_cells"], expected)
    check_identical(runs["boost_cells"], runs["mindspore.boost"])
