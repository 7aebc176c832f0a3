"""Automatic freezing for good (``grad_freeze.freeze_type`` 3, "auto"): front groups freeze once they converged.

The criterion is AutoFreeze's (Liu et al., 2021): a layer has converged when the rate of change of its gradient
norm between two evaluation intervals falls below a threshold; layers freeze front to back, for good. It needs
nothing the step does not already compute (FreezeOut's schedule needs the run's length in advance; Egeria's
plasticity needs a second, reference model's forward pass), and it decides from the run itself.

What runs where:

- in the graph, on every clean update (``record``): each trained segment's gradient norm (segment ``g`` = the
  parameters group ``g`` has and group ``g + 1`` does not) is added to ``grad_freeze.norms``, and the clock
  ``grad_freeze.countdown`` counts down the updates left until the next decision;
- on the host, when the countdown reaches 0 (``decide``, run by the train cell's host hook ``AutoFreezeHook``,
  one small device read per step): the interval's mean norm of the front trained segment ``f`` is compared with
  the previous interval's; if ``|mean - last| / last < threshold`` and at least ``warmup`` updates were applied,
  ``grad_freeze.frozen`` becomes ``f + 1``. The head (the last group) never freezes. In data-parallel training the
  norms are all-reduced first, so every rank decides the same thing.

All of it is Parameters, so a run resumed from a checkpoint decides exactly as the uninterrupted one.
"""
import numpy as np
from mindspore import Parameter, Tensor, nn, ops
from mindspore.common import dtype as mstype

__all__ = ["AutoFreeze", "AutoFreezeHook", "auto_freeze_decision"]

_square_sum = ops.MultitypeFuncGraph("square_sum")


@_square_sum.register("Tensor")
def _square_sum_tensor(grad):
    return ops.reduce_sum(ops.square(ops.cast(grad, mstype.float32)))


def auto_freeze_decision(frozen, norms, samples, last, updates, groups, warmup, threshold):
    """The host-side rule, on NumPy values: ``(frozen, last)`` after one decision.

    ``norms`` (float, per segment) is the sum of this interval's gradient norms over ``samples`` observations;
    ``last`` the previous interval's mean norms (0 where none yet); ``updates`` the updates applied so far.
    """
    mean = np.where(samples > 0, norms / np.maximum(samples, 1), 0.0)
    front = int(frozen)
    if front < groups - 1 and updates >= warmup and last[front] > 0 and samples[front] > 0:
        if abs(mean[front] - last[front]) / last[front] < threshold:
            frozen = front + 1
    return int(frozen), np.where(samples > 0, mean, last)


class AutoFreeze(nn.Cell):
    """The state and the in-graph half of the automatic schedule (see the module docstring).

    Args:
        segment_of (dict): ``{id(parameter): segment}`` for every parameter of the unfrozen optimizer (its segment:
            the last group that holds it). groups (int): the number of groups. interval (int): updates between decisions, >= 1.
        warmup (int): updates before the first freeze, >= 0. threshold (float): in (0, 1).

    Parameters (state, checkpointed):
        grad_freeze.frozen (int32): leading groups frozen for good; the train step trains from this group.
        grad_freeze.norms (float32, (groups,)): this interval's summed gradient norms per segment.
        grad_freeze.samples (float32, (groups,)): how many norms each segment summed.
        grad_freeze.last_norms (float32, (groups,)): the previous interval's mean norms.
        grad_freeze.updates (int32): updates applied so far. grad_freeze.countdown (int32): updates to the next
            decision.
    """

    def __init__(self, segment_of, groups, interval, warmup, threshold):
        super().__init__(auto_prefix=False)
        self.segment_of = dict(segment_of)
        self.groups = groups
        self.interval = interval
        self.warmup = warmup
        self.threshold = threshold
        self.hyper_map = ops.HyperMap()
        zeros = np.zeros(groups, np.float32)
        self.frozen = Parameter(Tensor(0, mstype.int32), name="grad_freeze.frozen", requires_grad=False)
        self.norms = Parameter(Tensor(zeros), name="grad_freeze.norms", requires_grad=False)
        self.samples = Parameter(Tensor(zeros), name="grad_freeze.samples", requires_grad=False)
        self.last_norms = Parameter(Tensor(zeros), name="grad_freeze.last_norms", requires_grad=False)
        self.updates = Parameter(Tensor(0, mstype.int32), name="grad_freeze.updates", requires_grad=False)
        self.countdown = Parameter(Tensor(interval, mstype.int32), name="grad_freeze.countdown",
                                   requires_grad=False)

    def observer(self, weights):
        """The in-graph recorder for a step whose gradients are those of ``weights`` (a suffix's Parameters)."""
        return AutoFreezeRecord(self, [self.segment_of[id(w)] for w in weights])

    def decide(self, all_reduce=None):
        """Host side, at the end of an interval: apply ``auto_freeze_decision`` to the state and start the next
        interval. ``all_reduce`` (a callable on Tensors) sums the statistics across ranks when data-parallel."""
        norms, samples = self.norms.value(), self.samples.value()
        if all_reduce is not None:
            norms, samples = all_reduce(norms), all_reduce(samples)
        frozen, last = auto_freeze_decision(int(self.frozen.asnumpy()), norms.asnumpy().astype(np.float64),
                                            samples.asnumpy().astype(np.float64),
                                            self.last_norms.asnumpy().astype(np.float64),
                                            int(self.updates.asnumpy()), self.groups, self.warmup, self.threshold)
        # Written by ops.assign into the Parameters' own memory: Parameter.set_data here would detach them from the
        # compiled step, which would go on updating the old memory.
        zeros = Tensor(np.zeros(self.groups, np.float32))
        for parameter, value in ((self.frozen, Tensor(frozen, mstype.int32)),
                                 (self.last_norms, Tensor(last.astype(np.float32))), (self.norms, zeros),
                                 (self.samples, zeros), (self.countdown, Tensor(self.interval, mstype.int32))):
            ops.assign(parameter, value)

    def frozen_for_good(self):
        """The number of leading groups frozen for good (host int)."""
        return int(self.frozen.asnumpy())


class AutoFreezeRecord(nn.Cell):
    """Adds one clean update's gradient norms per segment to an ``AutoFreeze``'s state and counts the update.

    Inputs: ``grads`` (tuple of Tensor: the step's gradients, one per parameter from the step's first on).
    Outputs: a token to make the update depend on.
    """

    def __init__(self, state, segments):
        super().__init__(auto_prefix=False)
        self.state = state
        self.segment_ids = Tensor(np.array(segments, np.int32))
        self.present = Tensor(np.isin(np.arange(state.groups), segments).astype(np.float32))
        self.groups = state.groups
        self.hyper_map = ops.HyperMap()

    def construct(self, grads):
        squares = ops.stack(self.hyper_map(_square_sum, grads))
        norms = ops.sqrt(ops.unsorted_segment_sum(squares, self.segment_ids, self.groups))
        added = ops.assign_add(self.state.norms, norms * self.present)
        counted = ops.assign_add(self.state.samples, self.present)
        ticked = ops.assign_add(self.state.updates, Tensor(1, mstype.int32))
        left = ops.assign_sub(self.state.countdown, Tensor(1, mstype.int32))
        return ops.depend(ops.depend(added, counted), ops.depend(ticked, left))


class AutoFreezeHook:
    """Host hook of a train cell with the automatic schedule: after a step that ended an interval, decide.

    Args:
        state (AutoFreeze): the schedule's state. all_reduce (callable or None): sums Tensors across ranks.
    """

    def __init__(self, state, all_reduce=None):
        self.state = state
        self.all_reduce = all_reduce

    def before_step(self, cell):
        """Nothing before a step."""

    def after_step(self, cell, inputs, outputs):
        if int(self.state.countdown.asnumpy()) <= 0:
            self.state.decide(self.all_reduce)
