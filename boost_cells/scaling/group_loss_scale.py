"""Group loss scaling ("enhanced AMP"): a separate dynamic loss scale per group of layers.

The user places ``manager(x, layer1, layer2)`` between layer groups in ``construct``, as with
``mindspore.boost.GroupLossScaleManager``. Groups are numbered 1..n in the order of ``loss_scale_groups``;
"layer" 0 and n + 1 are the two ends (the network's input and the loss) with a fixed scale of 1. The call is the
identity in the forward pass; in the backward pass it multiplies the gradient flowing through it by
``scale[layer1] / scale[layer2]``. Placed as in the reference's example (``(x, 0, 1)`` at the input,
``(x, g, g + 1)`` after group g), the gradient of every parameter of group g comes out multiplied by
``scale[g]``: the backward pass starts from 1, the boundary after the last group multiplies by its scale, and
each earlier boundary swaps one group's scale for the next one's.

``GroupLossScale`` is the train cell's side: it divides each group's gradients by its own scale, flags an overflow
per group, and moves each group's scale by its own flags (``DynamicLossScaleUpdate``, elementwise). The reference
needs Ascend's ``_DynamicLossScale`` kernel; this runs on CPU, GPU and Ascend.
"""
import numpy as np
from mindspore import Parameter, Tensor, nn, ops
from mindspore.common import dtype as mstype
from mindspore.train.loss_scale_manager import LossScaleManager

from ..mindspore_internals import keep_float32
from ..rules import check, check_scale_bounds
from .loss_scale import DynamicLossScaleUpdate, check_scale_value
from .overflow import zero_or_nan

__all__ = ["GroupLossScaleManager", "GroupLossScale"]

_NAME = "GroupLossScaleManager"


class _ScaleGradient(nn.Cell):
    """Identity forward; the backward pass multiplies the incoming gradient by ``ratio`` (float32 scalar),
    in float32, and casts back to the gradient's dtype (a float16 network keeps its dtype, the ratio stays exact).
    ``ratio`` is an input, not a Parameter: a GRAPH_MODE ``bprop`` cannot read Parameters."""

    def construct(self, x, ratio):
        return x

    def bprop(self, x, ratio, out, dout):
        return ops.cast(ops.cast(dout, mstype.float32) * ratio, dout.dtype), ops.zeros_like(ratio)


def _check_groups(groups):
    """``groups`` as a tuple of tuples of Parameters, disjoint; raises TypeError/ValueError otherwise."""
    if not isinstance(groups, (list, tuple)):
        raise TypeError(f"For '{_NAME}', 'loss_scale_groups' must be a list of lists of Parameters, but got "
                        f"{type(groups).__name__}.")
    seen = set()
    checked = []
    for index, group in enumerate(groups):
        if not isinstance(group, (list, tuple)) or not group or \
                not all(isinstance(param, Parameter) for param in group):
            raise TypeError(f"For '{_NAME}', 'loss_scale_groups[{index}]' must be a non-empty list of Parameters, "
                            f"but got {group!r}.")
        for param in group:
            if id(param) in seen:
                raise ValueError(f"For '{_NAME}', 'loss_scale_groups' must be disjoint, but parameter "
                                 f"'{param.name}' is in more than one group.")
            seen.add(id(param))
        checked.append(tuple(group))
    return tuple(checked)


class GroupLossScaleManager(nn.Cell, LossScaleManager):
    """Per-layer-group dynamic loss scales, drop-in for ``mindspore.boost.GroupLossScaleManager``.

    Call it between layer groups in ``construct`` (see the module docstring); pass it as ``scale_sense`` of
    ``BoostTrainOneStepWithLossScaleCell`` or as ``loss_scale_manager`` of ``build_train_network``. The train cell
    binds it to the optimizer's parameters (``bind``, which calls ``set_loss_scale_status`` to create the
    scales). It is a
    ``mindspore.amp.LossScaleManager``, so ``Model(..., loss_scale_manager=manager)`` accepts it.

    Each group's scale follows ``DynamicLossScaleUpdate`` on that group's own overflow flag: an overflow in the
    group divides its scale by ``scale_factor`` (floor ``min_scale``); it is multiplied by ``scale_factor`` (ceiling
    ``max_scale``) at the end of the ``scale_window``-th consecutive clean step of the group, so the step after it
    uses the grown scale. A step is skipped (no group updates) when any group overflowed. Defaults: the
    reference grows by 2**(1/1000) on every clean step and lowers by sqrt(2) on each overflow; here a scale
    doubles after 1000 clean steps and halves on an overflow, the rule of ``nn.DynamicLossScaleUpdateCell``.

    Args:
        init_loss_scale (float or list of float): the initial scale of every group, or one per group.
        loss_scale_groups (list of lists of Parameters): the groups, in order, disjoint; may be ``[]`` at first
            and assigned later (``manager.loss_scale_groups = [...]``), as in the reference's example. Together they
            must hold every parameter the optimizer updates.
        scale_factor (float): > 1. Default 2.0. scale_window (int): clean steps per growth, >= 1. Default 1000.
        min_scale, max_scale (float): floor and ceiling of every scale, in (0, 2**64]; 1.0 and 2**24 by default.

    Parameters (state, checkpointed; created when bound):
        group_loss_scale.scales (float32, shape (n,)): the current scale of each group.

    The reference's names for the same state, None before binding: ``dynamic_loss_scale`` (read-only: the n + 2
    scales by layer, 1 at both ends, as float32 scalars), ``layer_loss_scale`` (read-only: the n + 1 boundary ops,
    ``layer_loss_scale[layer1](x, ratio)`` the identity whose backward pass multiplies by ``ratio``; one cell serves
    every boundary here) and ``update_loss_scale_status(layer, update_ratio)``.

    Inputs: ``x`` (Tensor), ``layer1``, ``layer2`` (int constants in [0, n + 1]; others raise ValueError).
    Outputs: ``x``, unchanged (cast to float16/bfloat16 under ``to_float``; unchanged before binding, when
    there are no scales yet).

    Raises:
        TypeError, ValueError: a bad ``init_loss_scale``, ``loss_scale_groups`` or hyperparameter (each checked by
            its rule in ``boost_cells.rules``, as the config's ``loss_scale`` key of the same meaning: ``init``,
            ``factor``, ``window``, ``min_scale``, ``max_scale``), or an initial scale outside [min, max].
    """

    def __init__(self, init_loss_scale, loss_scale_groups, *, scale_factor=2.0, scale_window=1000, min_scale=1.0,
                 max_scale=2.0 ** 24):
        super().__init__()
        check(_NAME, "scale_factor", scale_factor)
        check(_NAME, "scale_window", scale_window)
        if isinstance(init_loss_scale, (list, tuple)) and not init_loss_scale:
            raise ValueError(f"For '{_NAME}', 'init_loss_scale' must be a number or a non-empty list, but got [].")
        for value in init_loss_scale if isinstance(init_loss_scale, (list, tuple)) else [init_loss_scale]:
            check_scale_bounds(_NAME, min_scale, value, max_scale, init_name="init_loss_scale")
        self.min_scale = float(min_scale)
        self.max_scale = float(max_scale)
        self.scale_factor = float(scale_factor)
        self.scale_window = int(scale_window)
        self._loss_scale = init_loss_scale
        self.loss_scale_groups = loss_scale_groups
        self.loss_scale_number = 0
        self.scales = None
        self.end = Tensor([1.0], mstype.float32)
        self.scale_gradient = _ScaleGradient()
        self.output_dtype = None

    def add_flags_recursive(self, **flags):
        """Mixed precision (``network.to_float(float16)``) keeps this cell in float32, since a float16 scale
        ratio overflows at 65504, and casts its output to the requested type instead, as the reference does."""
        return super().add_flags_recursive(**keep_float32(self, flags))

    def __setattr__(self, name, value):
        if name == "loss_scale_groups":
            # Checked, and kept as a tuple of tuples: nn.Cell would adopt a flat list of Parameters as its own.
            value = _check_groups(value)
        super().__setattr__(name, value)

    def get_loss_scale(self):
        """The initial loss scale, as given."""
        return self._loss_scale

    def get_drop_overflow_update(self):
        """True: a step with an overflow in any group updates nothing (``Model.train`` asks)."""
        return True

    def update_loss_scale(self, overflow):
        """Nothing to do on the host: the train cell moves every group's scale in the step itself. ``Model.train``
        calls this after each step, as for MindSpore's managers."""

    def get_update_cell(self):
        """The manager itself: ``build_train_network`` passes it to the train cell as ``scale_sense``."""
        return self

    def set_loss_scale_status(self, loss_scale_number, init_loss_scale):
        """Create the scales Parameter: ``loss_scale_number`` groups starting at ``init_loss_scale`` (a number,
        or a list with one number per group). Keeps the existing scales (a checkpoint may have set them) when
        their number already matches."""
        if self.scales is not None and self.loss_scale_number == loss_scale_number:
            return
        if isinstance(init_loss_scale, (list, tuple)):
            if len(init_loss_scale) != loss_scale_number:
                raise ValueError(f"For '{_NAME}', 'init_loss_scale' must have one value per group "
                                 f"({loss_scale_number}), but got {len(init_loss_scale)} values.")
            values = np.array(init_loss_scale, np.float32)
        else:
            values = np.full((loss_scale_number,), init_loss_scale, np.float32)
        self.loss_scale_number = loss_scale_number
        self.scales = Parameter(Tensor(values), name="group_loss_scale.scales", requires_grad=False)

    @property
    def dynamic_loss_scale(self):
        """The scale of each layer, the reference's ``dynamic_loss_scale``: a tuple of n + 2 float32 scalars, 1 at
        layer 0 (the input end) and n + 1 (the loss end), group g's scale at layer g + 1; None before binding. Read
        only: it is read from ``scales``, which ``update_loss_scale_status`` and the train cell move."""
        if self.scales is None:
            return None
        layers = ops.concat((self.end, self.scales, self.end))
        return tuple(layers[layer] for layer in range(self.loss_scale_number + 2))

    @property
    def layer_loss_scale(self):
        """The reference's boundary ops, one per layer 0..n: ``layer_loss_scale[layer1](x, ratio)`` is ``x``, its
        backward pass multiplied by ``ratio`` (the same cell for every layer here; the reference's
        ``_DynamicLossScale`` runs on Ascend only). None before binding."""
        return None if self.scales is None else (self.scale_gradient,) * (self.loss_scale_number + 1)

    def update_loss_scale_status(self, layer, update_ratio):
        """Multiply group ``layer``'s scale (0-based: the reference's layer ``layer + 1``) by ``update_ratio``, as the
        reference does (without the ``min_scale``/``max_scale`` bounds, which the train cell's policy keeps); returns
        the new scale. The train cell moves the scales itself; this is for code that moves them as the reference's
        cell does.

        Raises:
            ValueError: before binding, or ``layer`` outside ``[0, n)``.
        """
        if self.scales is None or not (isinstance(layer, int) and 0 <= layer < self.loss_scale_number):
            raise ValueError(f"For '{_NAME}', 'layer' must be a group index in [0, {self.loss_scale_number}) of a "
                             f"bound manager (bound when a train cell is built over it), but got {layer!r}.")
        ones = ops.ones((self.loss_scale_number,), mstype.float32)
        factors = ops.select(ops.arange(self.loss_scale_number) == layer, ones * update_ratio, ones)
        updated = ops.assign(self.scales, self.scales * factors)
        return updated[layer]

    def bind(self, params):
        """Group index (0-based) of each of ``params`` (the optimizer's parameters), after creating the scales.

        Raises:
            ValueError: no groups, or a parameter in ``params`` that no group holds.
        """
        if not self.loss_scale_groups:
            raise ValueError(f"For '{_NAME}', 'loss_scale_groups' is empty; assign the parameter groups "
                             "(manager.loss_scale_groups = [group1, group2, ...]) before building the train cell.")
        group_of = {id(param): index for index, group in enumerate(self.loss_scale_groups) for param in group}
        missing = [param.name for param in params if id(param) not in group_of]
        if missing:
            raise ValueError(f"For '{_NAME}', every parameter the optimizer updates must be in one of "
                             f"'loss_scale_groups', but got {missing} in none.")
        self.set_loss_scale_status(len(self.loss_scale_groups), self._loss_scale)
        return tuple(group_of[id(param)] for param in params)

    def construct(self, x, layer1, layer2):
        if self.scales is None:
            return x
        last = self.loss_scale_number + 1
        if not (isinstance(layer1, int) and isinstance(layer2, int) and 0 <= layer1 <= last and 0 <= layer2 <= last):
            raise ValueError(f"For 'GroupLossScaleManager', 'layer1' and 'layer2' must be ints in [0, {last}] (0 is "
                             f"the input end, {last} the loss end), but got {layer1} and {layer2}.")
        scales = ops.concat((self.end, self.scales, self.end))
        x = self.scale_gradient(x, ops.stop_gradient(scales[layer1] / scales[layer2]))
        if self.output_dtype is not None:
            x = ops.cast(x, self.output_dtype)
        return x


class GroupLossScale(nn.Cell):
    """The loss-scale part for a ``GroupLossScaleManager``: per-group unscale, overflow flags and scales.

    Same contract as ``LossScale``. ``value()`` and ``scale_sense`` are 1, the gradient the backward pass starts
    from: the manager's calls inside the network apply the scales (so ``locate_overflow`` with that
    ``scale_sense`` sees the step's backward pass).
    ``inverses`` gives each gradient its group's ``1 / scale``. ``construct(overflow, grads)`` flags group g when one
    of its gradients is inf or nan (all-reduced across ranks), moves every scale by its own flag, and returns
    ``(any flag, scale of group 1)``, the reference's outputs. ``overflow`` is the target detector's flag for
    the whole step: when it is set but no group shows inf/nan (Ascend saturation mode, where values saturate
    instead), every group counts as overflowed.

    Args:
        manager (GroupLossScaleManager): the manager the network calls. weights (tuple of Parameters): the
            optimizer's parameters, in gradient order. distributed (bool): all-reduce the group flags.

    Parameters (state, checkpointed):
        group_loss_scale.scales: the manager's (not owned here).
        group_loss_scale.clean_steps, group_loss_scale.overflows_left (int32, shape (n,)): the policy's counters.
    """

    def __init__(self, manager, weights, distributed=False):
        super().__init__(auto_prefix=False)
        group_ids = manager.bind(weights)
        count = manager.loss_scale_number
        self.scales = manager.scales
        self.scale_sense = Tensor(1.0, mstype.float32)
        self.policy = DynamicLossScaleUpdate(float(np.min(self.scales.asnumpy())), manager.scale_factor,
                                             manager.scale_window, manager.min_scale, manager.max_scale,
                                             shape=(count,), prefix="group_loss_scale")
        self.group_ids = Tensor(np.array(group_ids, np.int32))
        self.count = count
        self.all_reduce = ops.AllReduce() if distributed else None
        self.hyper_map = ops.HyperMap()
        self.identity = ops.Identity()

    def value(self):
        return self.scale_sense

    def inverses(self, value, grads):
        return ops.unstack(ops.gather(ops.reciprocal(self.scales), self.group_ids, 0))

    def set_scale(self, sens):
        """Set every group's scale to ``sens`` (Tensor of shape () or (1,), a finite float32 > 0)."""
        value = check_scale_value("set_sense_scale", sens)
        self.scales.set_data(Tensor(np.full((self.count,), value, np.float32)))

    def construct(self, overflow, grads):
        sums = ops.stack(self.hyper_map(zero_or_nan, grads))
        flags = ops.logical_not(ops.isfinite(ops.unsorted_segment_sum(sums, self.group_ids, self.count)))
        if self.all_reduce is not None:
            flags = self.all_reduce(ops.cast(flags, mstype.float32)) > 0
        flags = ops.logical_or(flags, ops.logical_and(overflow, ops.logical_not(flags.any())))
        flags = self.policy(self.scales, flags)
        return flags.any(), self.identity(ops.depend(self.scales, flags)[0])
