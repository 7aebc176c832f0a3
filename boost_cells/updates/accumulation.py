"""Gradient accumulation: k micro-steps make one update with the mean gradient of the k micro-batches."""
import numpy as np
from mindspore import Parameter, ParameterTuple, Tensor, nn, ops
from mindspore.common import dtype as mstype

from ..config import INT32_MAX
from .apply import ApplyGradients

__all__ = ["GradientAccumulation"]

_accumulate = ops.MultitypeFuncGraph("accumulate")
_mean = ops.MultitypeFuncGraph("mean")
_clear = ops.MultitypeFuncGraph("clear")


@_accumulate.register("Tensor", "Tensor")
def _accumulate_tensor(grad_sum, grad):
    return ops.assign_add(grad_sum, ops.cast(grad, mstype.float32))


@_mean.register("Number", "Tensor", "Tensor")
def _mean_tensor(inv_steps, grad_sum, like):
    return ops.cast(grad_sum * inv_steps, like.dtype)


@_clear.register("Tensor", "Tensor")
def _clear_tensor(after, grad_sum):
    return ops.assign(grad_sum, ops.depend(ops.zeros_like(grad_sum), after))


class GradientAccumulation(nn.Cell):
    """Accumulate ``max_accumulation_step`` micro-steps of gradients, then apply their mean once.

    Mean, not sum: with the loss a mean over its micro-batch, k micro-steps give the same update as one step on
    the k-times larger batch. Gradients are summed in float32 and divided by k once, on the k-th micro-step,
    which then calls ``apply_update`` (the cross-rank reduction lives there, so data-parallel training
    communicates once per cycle) and clears the buffer. A micro-step the caller skips (an overflow) never
    touches the buffer or the counter.

    Args:
        max_accumulation_step (int): micro-steps per update, >= 1.
        optimizer (Cell): the optimizer; its ``parameters`` shape the buffers.
        apply_update (Cell): the update strategy that applies the mean gradients (``construct(loss, grads)``);
            default ``ApplyGradients(optimizer)``.

    Parameters (state, checkpointed):
        grad_accumulation.accumulation_step (int32): micro-steps accumulated in the current cycle, in [0, k).
        grad_accumulation.<weight name> (float32): running gradient sum per weight.

    Inputs: ``loss`` (Tensor), ``grads`` (tuple of Tensor, this rank's gradients).
    Outputs: ``loss``, depending on the accumulation (and, on the k-th micro-step, on the update).
    """

    def __init__(self, max_accumulation_step, optimizer, apply_update=None):
        super().__init__(auto_prefix=False)
        if isinstance(max_accumulation_step, bool) or not isinstance(max_accumulation_step, int) \
                or not 1 <= max_accumulation_step <= INT32_MAX:
            raise ValueError("For 'GradientAccumulation', 'max_accumulation_step' must be an int >= 1 (at most "
                             f"2**31 - 1: an int32 counter), but got {max_accumulation_step!r}.")
        self.max_accumulation_step = max_accumulation_step
        self.inv_steps = 1.0 / max_accumulation_step
        self.apply_update = apply_update if apply_update is not None else ApplyGradients(optimizer)
        self.hyper_map = ops.HyperMap()
        self.grad_sums = ParameterTuple(
            Parameter(Tensor(np.zeros(w.shape, np.float32)), name="grad_accumulation." + w.name, requires_grad=False)
            for w in optimizer.parameters)
        self.accumulation_step = Parameter(Tensor(0, mstype.int32), name="grad_accumulation.accumulation_step",
                                           requires_grad=False)

    def monitor_state(self):
        """For ``BoostMonitor`` (host side, once per report): the micro-steps done in the current cycle."""
        return {"accumulation_step": int(self.accumulation_step.asnumpy())}

    def construct(self, loss, grads):
        added = self.hyper_map(_accumulate, self.grad_sums, grads)
        step = ops.depend(self.accumulation_step + 1, added)
        if step >= self.max_accumulation_step:
            means = self.hyper_map(ops.partial(_mean, self.inv_steps), self.grad_sums, grads)
            loss = self.apply_update(loss, means)
            loss = ops.depend(loss, self.hyper_map(ops.partial(_clear, loss), self.grad_sums))
            step = ops.zeros_like(step)
        return ops.depend(loss, ops.assign(self.accumulation_step, step))
