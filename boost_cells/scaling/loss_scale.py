"""Loss-scale policies: a clamped dynamic scale with hysteresis, and normalising ``scale_sense`` arguments.

A policy is a Cell ``(loss_scale: Parameter, overflow: bool Tensor) -> overflow`` that updates ``loss_scale`` in
place, the contract of MindSpore's ``DynamicLossScaleUpdateCell``/``FixedLossScaleUpdateCell``, so both kinds
plug into the train cells unchanged.
"""
import numpy as np
from mindspore import Parameter, Tensor, nn, ops
from mindspore.common import dtype as mstype

from ..rules import check, check_scale_bounds
from .log2_loss_scale import Log2LossScaleUpdate

__all__ = ["DynamicLossScaleUpdate", "HeldLossScale", "LossScale", "scale_sense_and_policy", "policy_from_config"]

class DynamicLossScaleUpdate(nn.Cell):
    """Dynamic loss scale, clamped to ``[min_scale, max_scale]``, tolerating ``hysteresis - 1`` overflows.

    When it grows: the scale is multiplied by ``factor`` at the end of the ``window``-th consecutive clean step
    (so the step after it uses the grown scale), exactly as ``nn.DynamicLossScaleUpdateCell``; with
    ``hysteresis=1`` and no clamping in play the two give the same trajectory. An overflow resets the clean-step
    count; it lowers the scale by ``factor`` only once ``hysteresis`` overflows have been seen since the scale
    last changed (DeepSpeed's ``delayed_shift``). Both directions are clamped, so the scale never leaves
    ``[min_scale, max_scale]``, never reaches inf and never drops below the floor.

    Args:
        loss_scale_value (float): initial scale. factor (float): > 1. window (int): clean steps per growth.
        min_scale, max_scale (float): floor and ceiling, max_scale <= 2**64 (so 1/scale stays a normal
            float32). hysteresis (int): overflows per lowering, >= 1.
        shape (tuple): shape of the scale it updates, () by default; ``(n,)`` updates n independent scales
            elementwise (one per parameter group, with a bool ``overflow`` of the same shape).
        prefix (str): prefix of its Parameters' names, "loss_scale" by default.

    Parameters (state, checkpointed; shape ``shape``):
        <prefix>.clean_steps (int32): consecutive clean steps since the last overflow or growth.
        <prefix>.overflows_left (int32): overflows still tolerated before the scale is lowered (stays at 1, and
            is not touched, when ``hysteresis == 1``).

    Inputs: ``loss_scale`` (Parameter, float32 of shape ``shape``, updated in place), ``overflow`` (bool, same
    shape). Outputs: ``overflow``, unchanged.

    Raises:
        TypeError, ValueError: an argument that its rule in ``boost_cells.rules`` refuses (the same rule as the
            config's ``loss_scale`` key of that name: ``window=2.0`` is refused, as in ``GroupLossScaleManager``), or
            bounds out of order.
    """

    def __init__(self, loss_scale_value, factor=2.0, window=2000, min_scale=1.0, max_scale=2.0 ** 24,
                 hysteresis=1, *, shape=(), prefix="loss_scale"):
        super().__init__()
        check_scale_bounds("DynamicLossScaleUpdate", min_scale, loss_scale_value, max_scale)
        for name, value in (("factor", factor), ("window", window), ("hysteresis", hysteresis)):
            check("DynamicLossScaleUpdate", name, value)
        self.loss_scale_value = float(loss_scale_value)
        self.factor = float(factor)
        self.window = int(window)
        self.min_scale = float(min_scale)
        self.max_scale = float(max_scale)
        self.hysteresis = int(hysteresis)
        self.clean_steps = Parameter(Tensor(np.zeros(shape, np.int32)), name=f"{prefix}.clean_steps",
                                     requires_grad=False)
        self.overflows_left = Parameter(Tensor(np.full(shape, self.hysteresis, np.int32)),
                                        name=f"{prefix}.overflows_left", requires_grad=False)

    def get_loss_scale(self):
        """The initial loss scale (as MindSpore's update cells report it)."""
        return self.loss_scale_value

    def construct(self, loss_scale, overflow):
        clean = (self.clean_steps + 1) * ops.cast(ops.logical_not(overflow), mstype.int32)
        grow = clean >= self.window
        if self.hysteresis == 1:
            lower = overflow
        else:
            left = self.overflows_left - ops.cast(overflow, mstype.int32)
            lower = left <= 0
            reset = ops.logical_or(grow, lower)
            ops.assign(self.overflows_left, ops.select(reset, ops.full_like(left, self.hysteresis), left))
        new_scale = ops.select(lower, ops.maximum(loss_scale / self.factor, self.min_scale),
                               ops.select(grow, ops.minimum(loss_scale * self.factor, self.max_scale), loss_scale))
        ops.assign(self.clean_steps, ops.select(grow, ops.zeros_like(clean), clean))
        return ops.depend(overflow, ops.assign(loss_scale, new_scale))


_FLOAT32_MAX = float(np.finfo(np.float32).max)


def check_scale_value(name, value):
    """``value`` (Tensor of shape () or (1,)) as a float; raises unless it is a finite, positive float32.

    Any such scale is accepted, even ``np.finfo(np.float32).max`` (MindSpore's own tests force an overflow with it,
    and the step then reports one and changes nothing); the 2**64 ceiling binds only what a policy grows to and
    what a config sets.
    """
    if not isinstance(value, Tensor) or value.shape not in ((), (1,)):
        raise ValueError(f"For '{name}', expected a Tensor of shape () or (1,), but got {value!r}.")
    number = float(value.asnumpy().reshape(-1)[0])
    if not 0 < number <= _FLOAT32_MAX:
        raise ValueError(f"For '{name}', the loss scale must be a finite float32 > 0 (at most {_FLOAT32_MAX:.6g}), "
                         f"but got {number}.")
    return number


def scale_sense_and_policy(scale_sense):
    """``(Parameter 'scale_sense', policy Cell)`` from a loss-scale update Cell or a Tensor of shape () or (1,).

    A Tensor gives a fixed scale (the policy leaves it alone; overflowing steps are still skipped).
    """
    if isinstance(scale_sense, nn.Cell):
        if not hasattr(scale_sense, "get_loss_scale"):
            raise TypeError("For 'scale_sense', a Cell must be a loss-scale update cell with 'get_loss_scale()' "
                            f"(e.g. nn.DynamicLossScaleUpdateCell), but got {type(scale_sense).__name__}.")
        value = Tensor(np.float32(scale_sense.get_loss_scale()))
        check_scale_value("scale_sense", value)
        return Parameter(value, name="scale_sense", requires_grad=False), scale_sense
    if isinstance(scale_sense, Tensor):
        number = check_scale_value("scale_sense", scale_sense)
        value = Tensor(scale_sense.asnumpy().astype(np.float32))
        return Parameter(value, name="scale_sense", requires_grad=False), nn.FixedLossScaleUpdateCell(number)
    raise TypeError("For 'scale_sense', expected a loss-scale update Cell or a Tensor of shape () or (1,), but got "
                    f"{type(scale_sense).__name__}.")


class LossScale(nn.Cell):
    """One loss scale for every gradient: the loss-scale part that ``BoostTrainOneStepWithLossScaleCell`` composes.

    The part contract (shared with ``GroupLossScale``): ``value()`` is the float32 scalar the backward pass
    starts from; ``inverses(value, grads)`` is each gradient's ``1 / scale`` (a tuple of scalars, one per gradient),
    by which the overflow detector unscales and checks the gradients in one pass (``unscale_and_check``);
    ``construct(overflow, grads)`` runs
    the policy on this step's overflow flag and returns ``(overflow, scale)``: the flag that decides the skip and
    a copy of the scale after the update; ``set_scale(sens)`` sets the scale by hand.

    Args:
        scale_sense (Cell or Tensor): a loss-scale update cell or a fixed scale, as ``scale_sense_and_policy``.

    Parameters (state, checkpointed):
        scale_sense (float32, shape () or (1,)): the current loss scale.
    """

    def __init__(self, scale_sense):
        super().__init__(auto_prefix=False)
        self.scale_sense, self.policy = scale_sense_and_policy(scale_sense)
        self.identity = ops.Identity()

    def value(self):
        return ops.reshape(self.scale_sense, ())

    def inverses(self, value, grads):
        return (ops.reciprocal(value),) * len(grads)

    def set_scale(self, sens):
        """Set the loss scale to ``sens`` (Tensor of shape () or (1,), a finite float32 > 0)."""
        check_scale_value("set_sense_scale", sens)
        self.scale_sense.set_data(sens.astype(self.scale_sense.dtype).reshape(self.scale_sense.shape))

    def construct(self, overflow, grads):
        overflow = self.policy(self.scale_sense, overflow)
        return overflow, self.identity(ops.depend(self.scale_sense, overflow))


class HeldLossScale(nn.Cell):
    """A loss-scale part over another ``LossScale``'s scale that leaves the scale where it is.

    A step built on it starts its backward pass from that scale, unscales by it and skips on its own overflow, but
    its ``construct(overflow, grads)`` returns ``(overflow, scale)`` without running the policy: the owner moves the
    scale once per step (the GAN cell's scale shared by several optimizers, or its shared skip decision).

    Args:
        loss_scale (LossScale): the part that owns the scale and its policy.
    """

    def __init__(self, loss_scale):
        super().__init__(auto_prefix=False)
        self.owner = loss_scale
        self.scale_sense = loss_scale.scale_sense
        self.identity = ops.Identity()

    def value(self):
        return self.owner.value()

    def inverses(self, value, grads):
        return self.owner.inverses(value, grads)

    def construct(self, overflow, grads):
        return overflow, self.identity(self.scale_sense)


def policy_from_config(section):
    """The update cell for a validated ``"loss_scale"`` config section."""
    if section["type"] == "static":
        return nn.FixedLossScaleUpdateCell(section["init"])
    if section["type"] == "log2":
        return Log2LossScaleUpdate(section["init"], section["inc"], section["dec"], section["min_scale"],
                                   section["max_scale"])
    return DynamicLossScaleUpdate(section["init"], section["factor"], section["window"], section["min_scale"],
                                  section["max_scale"], section["hysteresis"])
