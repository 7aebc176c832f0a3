"""Gradient accumulation: k micro-steps make one update with the mean gradient of the k micro-batches.

Also the reference's two accumulation ops (``mindspore.boost.grad_accumulation``), which client libraries apply
through ``HyperMap`` in their own train steps (MindCV's ``GradientAccumulation`` subclass, MindOne's train step);
``GradientAccumulation`` uses them itself, so its buffers hold what theirs hold.
"""
import numpy as np
from mindspore import Parameter, ParameterTuple, Tensor, ops
from mindspore.common import dtype as mstype

from ..rules import check
from .apply import ApplyGradients
from .strategy import UpdateStrategy

__all__ = ["GradientAccumulation", "gradient_accumulation_op", "gradient_clear_op"]

gradient_accumulation_op = ops.MultitypeFuncGraph("gradient_accumulation_op")
gradient_clear_op = ops.MultitypeFuncGraph("gradient_clear_op")
_as_gradient = ops.MultitypeFuncGraph("as_gradient")
_clear_after = ops.MultitypeFuncGraph("clear_after")


@gradient_accumulation_op.register("Int64", "Tensor", "Tensor")
def _add_share(accumulation_step, buffer, grad):
    """``buffer += grad / accumulation_step``: one micro-batch's share of the mean gradient over
    ``accumulation_step`` (k) micro-batches, computed in the buffer's dtype (a float32 buffer keeps a float16
    gradient's precision). Returns the buffer.

    The reference's registered types: k a Python int, ``buffer`` a Parameter shaped as ``grad``. Applied to every
    weight at once, partially applied to k: ``HyperMap()(F.partial(gradient_accumulation_op, k), buffers, grads)``.
    """
    return ops.assign_add(buffer, ops.cast(grad, buffer.dtype) / accumulation_step)


@gradient_clear_op.register("Tensor")
def _zero(buffer):
    """``buffer = 0`` (its shape and dtype kept), once an update consumed it. Returns the buffer. Applied as
    ``HyperMap()(F.partial(gradient_clear_op), buffers)``."""
    return ops.assign(buffer, ops.zeros_like(buffer))


@_as_gradient.register("Tensor", "Tensor")
def _as_gradient_tensor(buffer, grad):
    return ops.cast(buffer, grad.dtype)


@_clear_after.register("Tensor", "Tensor")
def _clear_after_tensor(after, buffer):
    return ops.assign(buffer, ops.depend(ops.zeros_like(buffer), after))


class GradientAccumulation(UpdateStrategy):
    """Accumulate ``max_accumulation_step`` micro-steps of gradients, then apply their mean once (the
    ``UpdateStrategy`` contract: ``step`` applies one update on a cycle's last micro-step, none on the others).

    Mean, not sum: with the loss a mean over its micro-batch, k micro-steps give the same update as one step on
    the k-times larger batch. Each micro-step adds ``grad / k`` into float32 buffers (``gradient_accumulation_op``),
    so after micro-step i of a cycle they hold the running sum of ``grad / k`` over its first i micro-batches, as
    the reference's buffers do. The k-th micro-step passes their sum, the mean (in the gradients' dtype), through
    ``grad_reducer`` to ``apply_update.step_reduced`` (so data-parallel training communicates once per cycle),
    clears the buffers and sets the counter back to 0. A micro-step the caller skips (an overflow) never touches
    the buffers or the counter.

    Args:
        max_accumulation_step (int): micro-steps per update, >= 1.
        optimizer (Cell): the optimizer; its ``parameters`` shape the buffers.
        apply_update (UpdateStrategy): the strategy that applies the mean gradients; default
            ``ApplyGradients(optimizer)``.
        shared (GradientAccumulation): another accumulation whose counter and buffers this one uses (``for_suffix``:
            a suffix step of gradient freezing over some of its weights); default None: its own state.

    Attributes, boost_cells' names:
        max_accumulation_step (int): k. apply_update (Cell): as given.
        grad_sums (ParameterTuple): the buffers, one per weight. accumulation_step (Parameter): the counter.
        grad_reducer (Cell or None): the cross-rank reduction of the mean, once per cycle; default the update
            strategy's (None stand-alone). A subclass may assign its own (MindCV's passes its train step's), and
            ``construct`` then applies that one.
    The same state under the reference's names (``mindspore.boost.GradientAccumulation``), for a subclass whose
    own ``construct`` drives it through ``gradient_accumulation_op`` and ``gradient_clear_op``, as MindCV's does:
        _max_accumulation_step (int): k. _grad_accumulation (ParameterTuple): the buffers (``grad_sums``).
        _accumulation_step (Parameter): the counter (``accumulation_step``). optimizer (Cell), weights
        (``optimizer.parameters``), hyper_map (``ops.HyperMap``).
    Where they differ from the reference's: the buffers are float32 for weights of any float dtype (the
    reference's take the weights' dtype; a subclass that hands them to the optimizer of float16 weights gives it
    float32 gradients here), and the counter is named ``grad_accumulation.accumulation_step``
    (the reference's ``accumulation_step`` would repeat in a cell holding two accumulations). The reference's
    ``construct`` leaves the cross-rank reduction to its caller; this one applies ``grad_reducer``.

    Parameters (state, checkpointed):
        grad_accumulation.accumulation_step (int32): micro-steps accumulated in the current cycle, in [0, k).
        grad_accumulation.<weight name> (float32): the running sum of ``grad / k`` of the cycle, per weight.

    Inputs: ``loss`` (Tensor), ``grads`` (tuple of Tensor, this rank's gradients).
    Outputs: ``loss``, depending on the accumulation (and, on the k-th micro-step, on the update).
    ``step_reduced(loss, grads, inputs)`` takes gradients already reduced across ranks (the reference's order) and
    does not reduce the mean again; ``inputs`` go to ``apply_update`` with the mean (DimReduce's line search runs the
    network on the last micro-batch).
    """

    def __init__(self, max_accumulation_step, optimizer, apply_update=None, *, shared=None):
        max_accumulation_step = int(check("GradientAccumulation", "max_accumulation_step", max_accumulation_step))
        apply_update = apply_update if apply_update is not None else ApplyGradients(optimizer)
        super().__init__(optimizer.parameters, apply_update.grad_reducer)
        self.optimizer = optimizer
        self.max_accumulation_step = max_accumulation_step
        self.apply_update = apply_update
        self.hyper_map = ops.HyperMap()
        if shared is None:
            self.grad_sums = ParameterTuple(
                Parameter(Tensor(np.zeros(w.shape, np.float32)), name="grad_accumulation." + w.name,
                          requires_grad=False)
                for w in optimizer.parameters)
            self.accumulation_step = Parameter(Tensor(0, mstype.int32), name="grad_accumulation.accumulation_step",
                                               requires_grad=False)
        else:
            position = {id(w): i for i, w in enumerate(shared.weights)}
            self.grad_sums = ParameterTuple(shared.grad_sums[position[id(w)]] for w in optimizer.parameters)
            self.accumulation_step = shared.accumulation_step
        self._max_accumulation_step = max_accumulation_step
        self._grad_accumulation = self.grad_sums
        self._accumulation_step = self.accumulation_step

    def for_suffix(self, optimizer):
        return GradientAccumulation(self.max_accumulation_step, optimizer, self.apply_update.for_suffix(optimizer),
                                    shared=self)

    def adasum_part(self):
        return self.apply_update.adasum_part()

    def monitor_state(self):
        """For ``BoostMonitor`` (host side, once per report): the micro-steps done in the current cycle."""
        return {"accumulation_step": int(self.accumulation_step.asnumpy())}

    def _micro_step(self, loss, grads, inputs, reduced):
        added = self.hyper_map(ops.partial(gradient_accumulation_op, self.max_accumulation_step), self.grad_sums,
                               grads)
        step = ops.depend(self.accumulation_step + 1, added)
        applied = self.no_update
        if step >= self.max_accumulation_step:
            means = self.hyper_map(_as_gradient, self.grad_sums, grads)
            if not reduced and self.grad_reducer is not None:
                means = self.grad_reducer(means)
            loss, applied = self.apply_update.step_reduced(loss, means, inputs)
            loss = ops.depend(loss, self.hyper_map(ops.partial(_clear_after, loss), self.grad_sums))
            step = ops.zeros_like(step)
        return ops.depend(loss, ops.assign(self.accumulation_step, step)), applied

    def step(self, loss, grads, inputs):
        return self._micro_step(loss, grads, inputs, False)

    def step_reduced(self, loss, grads, inputs):
        return self._micro_step(loss, grads, inputs, True)
