"""The log2 loss-scale policy of NVIDIA's tflib (StyleGAN): the scale moves smoothly in log2 space.

Where the dynamic policy doubles the scale once per clean window, this one adds ``inc`` to log2(scale) after
every clean step and subtracts ``dec`` on every overflow; with tflib's 0.0005 and 1.0 the scale grows by a
factor of 2 every 2000 clean steps, but a little on each, and halves on an overflow.
"""
import math

import numpy as np
from mindspore import Parameter, Tensor, nn, ops

from ..config import check_scale_bounds, is_real

__all__ = ["Log2LossScaleUpdate"]


class Log2LossScaleUpdate(nn.Cell):
    """Loss scale kept in log2: ``+inc`` per clean step, ``-dec`` per overflow, clamped to ``[min, max]``.

    Same contract as ``DynamicLossScaleUpdate``: ``construct(loss_scale, overflow) -> overflow`` updates the
    train cell's ``loss_scale`` Parameter in place, to ``2 ** log2`` after this step's change, so the next step
    uses it. The log2 value is state of its own (float32), so the trajectory is exactly the float32 sum of the
    increments, not a chain of log2/exp2 round trips. If the scale was set from outside since the last step
    (``set_sense_scale``), the policy continues from log2 of that scale.

    Args:
        loss_scale_value (float): initial scale (not its log2). inc (float): log2 added per clean step, > 0
            (tflib: 0.0005). dec (float): log2 subtracted per overflow, > 0 (tflib: 1.0).
        min_scale, max_scale (float): floor and ceiling of the scale, ``0 < min <= init <= max <= 2**64``.

    Parameters (state, checkpointed):
        loss_scale.log2 (float32, shape ()): log2 of the current scale.

    Inputs: ``loss_scale`` (Parameter, float32 of shape () or (1,), updated in place), ``overflow`` (bool scalar).
    Outputs: ``overflow``, unchanged.

    Raises:
        ValueError: bounds out of order or outside (0, 2**64], or ``inc``/``dec`` not finite numbers > 0.
    """

    def __init__(self, loss_scale_value, inc=0.0005, dec=1.0, min_scale=1.0, max_scale=2.0 ** 24):
        super().__init__()
        check_scale_bounds("Log2LossScaleUpdate", min_scale, loss_scale_value, max_scale)
        for name, value in (("inc", inc), ("dec", dec)):
            if isinstance(value, bool) or not is_real(value) or not 0 < value < math.inf:
                raise ValueError(f"For 'Log2LossScaleUpdate', '{name}' must be a finite number > 0, but got "
                                 f"{value!r}.")
        self.loss_scale_value = float(loss_scale_value)
        self.inc = float(inc)
        self.dec = float(dec)
        self.min_log2 = math.log2(min_scale)
        self.max_log2 = math.log2(max_scale)
        self.log2 = Parameter(Tensor(np.float32(math.log2(loss_scale_value))), name="loss_scale.log2",
                              requires_grad=False)

    def get_loss_scale(self):
        """The initial loss scale (as MindSpore's update cells report it)."""
        return self.loss_scale_value

    def construct(self, loss_scale, overflow):
        scale = ops.reshape(loss_scale, ())
        current = ops.select(scale == ops.exp2(self.log2), self.log2, ops.log2(scale))
        step = ops.select(overflow, ops.full_like(current, -self.dec), ops.full_like(current, self.inc))
        new_log2 = ops.clamp(current + step, self.min_log2, self.max_log2)
        new_scale = ops.reshape(ops.exp2(new_log2), loss_scale.shape)
        return ops.depend(overflow, ops.depend(ops.assign(loss_scale, new_scale), ops.assign(self.log2, new_log2)))
