"""Freezing schedules: from which group each step trains, decided inside the compiled step.

A schedule is a Cell that owns its state (named Parameters, so a resumed run decides as the uninterrupted one) and
serves the switch and the frozen-prefix cache through one small contract:

- ``train_from()`` (graph): int32 scalar, the first group the next step trains; the groups before it get no
  gradient. ``trained_from`` (host, fixed at construction): every value it can take, so only those steps compile.
- ``frozen_for_good()`` (host, one scalar read): the number of leading groups that no remaining step trains, whose
  outputs the cache may keep. ``frozen_levels`` (host, fixed): the values above 0 it can take, so the cache builds a
  step for each.
- ``observer(weights)``: a Cell that sees the gradients of a step over ``weights`` (``construct(grads) -> token``),
  or None when the schedule needs none.
- ``advance(applied)`` (graph): after a step that applied ``applied`` optimizer updates (int32 scalar: 0 on an
  overflow or an accumulating micro-step), move on. Returns a token to make the step's outputs depend on.

- ``plan`` (host): the ``FreezePlan`` it follows, whose numbers every description of the schedule reads;
  ``fit(plan)`` (host, before the first step) makes it follow the same plan made for another run length.

Two schedules: ``SequenceSchedule`` walks a sequence of group indices drawn in advance (the continuous, interval and
progressive types), ``AutoSchedule`` freezes converged front groups for good (type 3, "auto"), deciding in the graph
every ``interval`` updates. Neither reads anything on the host during a step, so either holds however MindSpore
calls the train cell: directly, nested in another Cell's graph (dataset sink mode), or from a subclass's
``construct``.
"""
import numpy as np
from mindspore import Parameter, Tensor, nn, ops
from mindspore.common import dtype as mstype

__all__ = ["AutoSchedule", "SequenceSchedule", "make_schedule"]

_square_sum = ops.MultitypeFuncGraph("square_sum")


@_square_sum.register("Tensor")
def _square_sum_tensor(grad):
    return ops.reduce_sum(ops.square(ops.cast(grad, mstype.float32)))


def _int32(value):
    return Tensor(value, mstype.int32)


class SequenceSchedule(nn.Cell):
    """A sequence of first-trained groups drawn in advance (a ``FreezePlan``'s), walked by the updates applied.

    Args:
        plan (FreezePlan): the plan, of any kind but "auto": its ``sequence``, ``floors`` and ``cyclic``.

    Parameters (state, checkpointed):
        grad_freeze.position (int32): the position in the sequence, in ``[0, plan.length)``; it advances by the
            updates a step applied, so an overflowing step or an accumulating micro-step keeps it.
    """

    def __init__(self, plan):
        super().__init__(auto_prefix=False)
        self.position = Parameter(_int32(0), name="grad_freeze.position", requires_grad=False)
        self.fit(plan)

    def fit(self, plan):
        """Walk ``plan`` (the same groups, made for another run length: ``FreezePlan.for_run``). Its tables are
        constants of the compiled step, so fit before the first step."""
        self.plan = plan
        self.trained_from = plan.trained_from
        self.frozen_levels = plan.frozen_levels
        self.length = plan.length
        self.cyclic = plan.cyclic
        self.strategy_table = Tensor(np.array(plan.sequence, np.int32))

    def train_from(self):
        return self.strategy_table[self.position]

    def observer(self, weights):  # pylint: disable=unused-argument
        """None: the sequence needs no statistics."""
        return None

    def advance(self, applied):
        position = self.position + applied
        if self.cyclic:
            position = position % self.length
        else:
            position = ops.minimum(position, self.length - 1)
        return ops.assign(self.position, position)

    def current_index(self):
        """The first group the next step trains (host int)."""
        return self.plan.train_from(int(self.position.asnumpy()))

    def frozen_for_good(self):
        """The leading groups no remaining step trains (host int): with a sequence walked once the current index,
        with a cyclic one the smallest index of the whole sequence (usually 0)."""
        return self.plan.frozen_for_good(int(self.position.asnumpy()))


class GradientNorms(nn.Cell):
    """Adds one clean step's gradient norms per segment to an ``AutoSchedule``'s interval statistics.

    Inputs: ``grads`` (tuple of Tensor: the gradients of the step's weights, in order).
    Outputs: a token to make the update depend on.
    """

    def __init__(self, schedule, segments):
        super().__init__(auto_prefix=False)
        self.schedule = schedule
        self.segment_ids = Tensor(np.array(segments, np.int32))
        self.present = Tensor(np.isin(np.arange(schedule.groups), segments).astype(np.float32))
        self.groups = schedule.groups
        self.hyper_map = ops.HyperMap()

    def construct(self, grads):
        squares = ops.stack(self.hyper_map(_square_sum, grads))
        norms = ops.sqrt(ops.unsorted_segment_sum(squares, self.segment_ids, self.groups))
        added = ops.assign_add(self.schedule.norms, norms * self.present)
        return ops.depend(added, ops.assign_add(self.schedule.samples, self.present))


class AutoSchedule(nn.Cell):
    """Front groups freeze for good once they converged (``grad_freeze.freeze_type`` 3, "auto"), decided in the graph.

    The criterion is AutoFreeze's (Liu et al., 2021): a layer has converged when the rate of change of its gradient
    norm between two evaluation intervals falls below a threshold; layers freeze front to back, for good. It needs
    nothing the step does not already compute (FreezeOut needs the run's length in advance, Egeria's plasticity a
    second, reference model's forward pass).

    - Every clean step adds each trained segment's gradient norm to ``norms`` (segment ``g``: the parameters that
      group ``g`` has and group ``g + 1`` has not) and counts it in ``samples`` (``observer``).
    - ``advance`` counts the updates applied; the intervals end where ``updates - warmup`` is a multiple of
      ``interval`` (so the first decision that may freeze comes exactly at the end of the warm-up), and at each end
      it decides: the front trained segment ``f`` (``f = frozen``) freezes (``frozen`` becomes ``f + 1``) when at least
      ``warmup`` updates were applied, both intervals observed it, and ``|mean - last| / last < threshold`` for its
      mean norm over this interval and the previous one's. The head (the last group) never freezes. Then the
      interval's means become ``last_norms`` (where observed) and the statistics restart. In float32, computed and
      then selected, so no step reads anything on the host.
    - Data-parallel (``distributed``), the interval's sums are all-reduced before each decision (one small
      all-reduce per step, outside any branch), so every rank decides the same.

    Args:
        plan (FreezePlan): an "auto" plan: its ``groups`` and ``criterion``.
        segment_of (dict): ``{id(parameter): segment}`` for every trained parameter (its segment: the last group
            that holds it). distributed (bool): sum the statistics across ranks before deciding.

    Parameters (state, checkpointed):
        grad_freeze.frozen (int32): leading groups frozen for good; steps train from this group.
        grad_freeze.norms (float32, (groups,)): this interval's summed gradient norms per segment.
        grad_freeze.samples (float32, (groups,)): how many norms each segment summed.
        grad_freeze.last_norms (float32, (groups,)): the previous interval's mean norms (0: not observed yet).
        grad_freeze.updates (int32): updates applied so far.
    """

    def __init__(self, plan, segment_of, distributed=False):
        super().__init__(auto_prefix=False)
        self.segment_of = dict(segment_of)
        self.groups = plan.groups
        self.fit(plan)
        self.all_reduce = ops.AllReduce() if distributed else None
        self.group_ids = Tensor(np.arange(self.groups, dtype=np.int32))
        zeros = np.zeros(self.groups, np.float32)
        self.frozen = Parameter(_int32(0), name="grad_freeze.frozen", requires_grad=False)
        self.norms = Parameter(Tensor(zeros), name="grad_freeze.norms", requires_grad=False)
        self.samples = Parameter(Tensor(zeros), name="grad_freeze.samples", requires_grad=False)
        self.last_norms = Parameter(Tensor(zeros), name="grad_freeze.last_norms", requires_grad=False)
        self.updates = Parameter(_int32(0), name="grad_freeze.updates", requires_grad=False)

    def fit(self, plan):
        """Follow ``plan`` (the same groups, made for another run length: ``FreezePlan.for_run``). Its interval and
        warm-up are constants of the compiled step, so fit before the first step."""
        self.plan = plan
        self.trained_from = plan.trained_from
        self.frozen_levels = plan.frozen_levels
        self.interval = plan.criterion.interval
        self.warmup = plan.criterion.warmup
        self.threshold = plan.criterion.threshold
        self.interval_end = self.warmup % self.interval  # updates % interval where every interval ends

    def train_from(self):
        return self.frozen + 0

    def observer(self, weights):
        """The recorder for a step over ``weights`` (a suffix's Parameters)."""
        return GradientNorms(self, [self.segment_of[id(w)] for w in weights])

    def _interval_sums(self, applied):
        """This interval's (norms, samples), summed over ranks when distributed (read after the step's record)."""
        norms = ops.depend(self.norms, applied)
        samples = ops.depend(self.samples, applied)
        if self.all_reduce is None:
            return norms, samples
        summed = self.all_reduce(ops.concat((norms, samples)))
        return summed[:self.groups], summed[self.groups:]

    def advance(self, applied):
        norms, samples = self._interval_sums(applied)
        updates = self.updates + applied
        decide = ops.logical_and(applied > 0, updates % self.interval == self.interval_end)
        mean = norms / ops.maximum(samples, 1.0)
        last = self.last_norms + 0.0
        front = self.frozen + 0
        at_front = ops.cast(ops.equal(self.group_ids, front), mstype.float32)
        mean_front = ops.reduce_sum(mean * at_front)
        last_front = ops.reduce_sum(last * at_front)
        observed = ops.logical_and(last_front > 0, ops.reduce_sum(samples * at_front) > 0)
        change = ops.abs(mean_front - last_front) / ops.maximum(last_front, 1e-30)
        freeze = ops.logical_and(ops.logical_and(decide, front < self.groups - 1),
                                 ops.logical_and(updates >= self.warmup,
                                                 ops.logical_and(observed, change < self.threshold)))
        zeros = ops.zeros_like(norms)
        tokens = (ops.assign(self.frozen, front + ops.cast(freeze, mstype.int32)),
                  ops.assign(self.last_norms, ops.select(ops.logical_and(decide, samples > 0), mean, last)),
                  ops.assign(self.norms, ops.select(ops.broadcast_to(decide, norms.shape), zeros, norms)),
                  ops.assign(self.samples, ops.select(ops.broadcast_to(decide, samples.shape), zeros, samples)),
                  ops.assign(self.updates, updates))
        return ops.depend(tokens[0], tokens[1:])

    def current_index(self):
        """The first group the next step trains (host int)."""
        return int(self.frozen.asnumpy())

    def frozen_for_good(self):
        """The leading groups frozen for good (host int)."""
        return int(self.frozen.asnumpy())


def make_schedule(freeze_opt, distributed):
    """The schedule of a ``FreezeOpt``'s plan: an ``AutoSchedule`` over its segments for an "auto" plan, else a
    ``SequenceSchedule``."""
    plan = freeze_opt.plan
    if plan.kind != "auto":
        return SequenceSchedule(plan)
    segment_of = {}
    for index, opt in enumerate(freeze_opt.opts):
        segment_of.update((id(p), index) for p in opt.parameters)
    return AutoSchedule(plan, segment_of, distributed)
