"""Freezing schedules: from which group each step trains, decided inside the compiled step.

A schedule is a Cell that owns its state (named Parameters, so a resumed run decides as the uninterrupted one) and
serves the switch and the frozen-prefix cache through one small contract:

- ``train_from()`` (graph): int32 scalar, the first group the next step trains; the groups before it get no
  gradient. ``trained_from`` (host, fixed at construction): every value it can take, so only those steps compile.
- ``frozen_for_good()`` (host, one scalar read): the number of leading groups that no remaining step trains, whose
  outputs the cache may keep. ``frozen_levels`` (host, fixed): the values above 0 it can take, so the cache builds a
  step for each. ``applied_updates()`` (host, one scalar read) and ``level_changes_at(updates)`` (host): the next
  update count at which ``frozen_for_good()`` may change, so the host route reads the level only there.
- ``advance(applied, loss)`` (graph): after a step that applied ``applied`` optimizer updates (int32 scalar: 0 on an
  overflow or an accumulating micro-step; ``loss``: the step's training loss), move on. Returns a token to make the
  step's outputs depend on. ``count(applied, loss)`` (graph) moves on without deciding; where the schedule takes
  decisions (``decides``, host bool), the host route takes each itself after the step of a decision's update
  (``decides_after``) with ``decide_now()``: the same rule, out of the step's graph, run op by op.
- ``plan`` (host): the ``FreezePlan`` it follows, whose numbers every description of the schedule reads;
  ``fit(plan)`` (host, before the first step) makes it follow the same plan made for another run length.

Two schedules: ``SequenceSchedule`` walks a sequence of group indices drawn in advance (the continuous, interval and
progressive types), ``AutoSchedule`` freezes settled front groups for good (type 3, "auto") to the levels the run
allows, deciding in the graph every ``interval`` updates. Neither reads anything on the host during a step, so
either holds however MindSpore calls the train cell: directly, nested in another Cell's graph (dataset sink mode), or
from a subclass's ``construct``.
"""
import numpy as np
from mindspore import Parameter, ParameterTuple, Tensor, nn, ops
from mindspore.common import dtype as mstype

from ...flat_vectors import flatten

__all__ = ["AutoSchedule", "SequenceSchedule", "make_schedule"]

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

    decides = False  # a sequence drawn in advance takes no decision

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

    def count(self, applied, loss=None):
        """As ``advance``: walking the sequence is all a step does."""
        return self.advance(applied, loss)

    def advance(self, applied, loss=None):  # pylint: disable=unused-argument
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

    def applied_updates(self):
        """The optimizer updates applied so far, as far as the sequence counts them (host int)."""
        return int(self.position.asnumpy())

    def level_changes_at(self, updates):
        """The least update count above ``updates`` at which ``frozen_for_good()`` may change (host int), or None:
        the next level's first update of a sequence walked once; never for a cyclic one."""
        return next((start - 1 for _, start in self.plan.stage_starts if start - 1 > updates), None)


class AutoSchedule(nn.Cell):
    """Front groups freeze for good once their weights have settled (``grad_freeze.freeze_type`` 3, "auto"), to the
    levels allowed (the whole front at once, or group by group where the run pays for it), decided in the graph.

    The evidence is how far each segment's weights moved over the last decision interval, against their size, per
    100 updates: ``displacement[g] = |w_g - s_g| / |w_g| * 100 / interval`` over segment ``g``'s weights ``w_g``
    (segment ``g``: the parameters that group ``g`` has and group ``g + 1`` has not) and their copy ``s_g`` taken at
    the previous decision. Per 100 updates, so that a run whose intervals are a few updates long is held to the same
    rate as a long one. A segment whose weights still move keeps training; one that barely moves any more has
    settled. The displacement is what freezing takes away: the weights stop where they are, and the rest of the
    network trains on their outputs. It is not how useful their outputs already are: on ``bench/``'s fine-tuning
    workload a pretrained front moved as fast as a fresh network's (``bench/freeze_trace.py``).

    - Every ``interval`` updates (the intervals end where ``updates - warmup`` is a multiple of ``interval``, so the
      first decision that may freeze comes exactly at the end of the warm-up) it measures every segment's
      displacement and takes the copies again. A segment is quiet when its displacement is below ``threshold``, or
      below ``head_ratio`` times the head's: a front that moves far less than the head is not what the task is
      still learning (a pretrained front under a new head, bench/freeze_trace.py: a quarter to a third of the
      head's rate at first, where a front trained from scratch moved 0.84 to 1.7 times as fast). It has settled
      when it was quiet over the last two intervals (one quiet interval can be noise). From ``warmup`` updates on,
      the leading segments that have settled may freeze for good: ``frozen`` becomes the deepest level ``k`` (the
      first ``k`` groups frozen) that is allowed (``allowed[k]``) and that the settled segments reach; the head's
      group never freezes. Which levels are allowed is what the run can pay for, as each level is a step that costs
      a compile. Without the host, only the whole front's (one level, compiled with the step: a front where one
      segment still moves waits); a host route that measures the run (``FrozenLevelRoute``, with
      ``grad_freeze.payback``) allows the levels whose compile the steps left repay (``payback``), so the front
      freezes group by group where steps are dear, and at once, or not at all, where compiles are. The work runs
      only at a decision (a branch of the compiled step, over each segment's weights flattened into one vector, so
      the branch compiles small), a step between decisions costs a counter, and no step reads anything on the host.
    - Under an optimizer that normalises its steps (Adam and its kin, RMSProp, Lamb, LARS, Lion, ...:
      ``normalised_steps``), every weight moves by about the learning rate whatever its gradient, so a segment's
      displacement measures the learning rate against the weights' size, not whether the segment still learns
      (bench/o1_speedup.py's transformer: every segment below 0.4 from the first decision, at chance as at the end).
      There ``threshold`` is not applied: a segment is quiet only when it moves less than ``head_ratio`` times the
      head, which the same normalisation moves alike (0: nothing freezes under such an optimizer).
    - A front cannot have settled while the network has not learned: a whole network standing still on a plateau
      (at chance, as a transformer trained with Adam does for an epoch or two) moves little everywhere, and under
      Adam-type optimizers every weight moves by about the learning rate whatever its gradient, so displacement
      alone would call such a front settled. With ``loss_drop`` above 0, no decision freezes anything until the
      mean training loss (what each step returns, summed over the interval in the graph) of the interval just
      ended lies ``loss_drop`` of the first interval's mean below it.
    - Nor while the loss still falls steeply: a new head's first fast adaptation (fine-tuning a pretrained front, the
      loss falling 87% over the first two intervals, bench/freeze_trace.py) is when the head moves far faster than the
      front, so the head ratio calls the front settled although the task has only begun to use it. With
      ``last_fall`` below 1, no decision freezes anything while the loss fell more over the interval just ended
      than ``last_fall`` of its whole fall since the first interval: ``previous - last > last_fall * (first -
      last)`` (the interval's mean ``last``, the one before ``previous``, the first interval's ``first``).
    - Data-parallel, the interval's training losses are summed over the ranks at a decision (one AllReduce of two
      numbers), as each rank sees its own batches; every rank holds the same weights, so every rank measures the
      same displacements and the same loss, and decides
      the same without a collective.

    Args:
        plan (FreezePlan): an "auto" plan: its ``groups`` and ``criterion`` (``interval``, ``warmup``,
            ``threshold``: the displacement per 100 updates below which a segment is quiet; ``head_ratio``: the
            share of the head's displacement below which it is quiet too, 0 for none; ``loss_drop``: the share of
            the first interval's mean training loss the loss must have fallen by before anything freezes, 0 for no
            such condition; ``last_fall``: the share of the loss's whole fall the last interval may still account
            for when anything freezes, 1 for no such condition).
        segment_of (dict): ``{id(parameter): segment}`` for every trained parameter (its segment: the last group
            that holds it). weights (ParameterTuple): the trained weights (the unfrozen optimizer's), in order.
        normalised_by (str): the optimizer's class name where it normalises its steps (``normalised_steps``): the
            threshold is then not applied; None (default): it is. ranks_loss (bool): data-parallel, sum the
            interval's training losses over the ranks before the loss condition (default False: stand-alone).

    Parameters (state, checkpointed):
        grad_freeze.frozen (int32): leading groups frozen for good; steps train from this group.
        grad_freeze.allowed (bool, (groups,)): the levels a decision may freeze to (``allow``); at first the whole
            front's alone (``groups - 1``).
        grad_freeze.updates (int32): updates applied so far.
        grad_freeze.displacement (float32, (groups,)): each segment's displacement per 100 updates at the last
            decision (-1 before the first; the head's 0 without ``head_ratio``).
        grad_freeze.snapshot.<segment> (float32, flat): segment ``<segment>``'s weights (every segment but the
            head's, and the head's with ``head_ratio``), flattened in order, as at the last decision (the device
            memory of those weights once more).
        grad_freeze.loss_sum (float32, (2,)): with a loss condition (``loss_drop`` above 0 or ``last_fall`` below
            1), the training losses of the interval so far (their sum, and how many were finite); data-parallel,
            this rank's own (summed over the ranks at a decision).
        grad_freeze.loss (float32, (4,)): with a loss condition, the first interval's mean training loss, the last
            interval's, the intervals measured (0 before the first), and the mean of the interval before the last
            (the last's before the second).
        grad_freeze.frozen_at (int32, (groups,)): the update after which each level froze (0: not frozen).
        grad_freeze.evidence (float32, (groups, groups + 3)): per level, the figures of the decision that froze it:
            each segment's displacement, then the first, last and previous intervals' mean training loss (0 without
            a loss condition); zeros for a level not frozen. The decision records read these.
    """

    decides = True  # the decisions the host route takes itself (``decide_now``)

    def __init__(self, plan, segment_of, weights, normalised_by=None, ranks_loss=False):
        super().__init__(auto_prefix=False)
        self.segment_of = dict(segment_of)
        self.groups = plan.groups
        self.normalised_by = normalised_by
        self.all_reduce = ops.AllReduce() if ranks_loss else None
        self.fit(plan)
        self.frozen = Parameter(_int32(0), name="grad_freeze.frozen", requires_grad=False)
        self.updates = Parameter(_int32(0), name="grad_freeze.updates", requires_grad=False)
        self.displacement = Parameter(Tensor(-np.ones(self.groups, np.float32)), name="grad_freeze.displacement",
                                      requires_grad=False)
        self.allowed = Parameter(Tensor(self.one_level()), name="grad_freeze.allowed", requires_grad=False)
        self.loss_sum = Parameter(Tensor(np.zeros(2, np.float32)), name="grad_freeze.loss_sum", requires_grad=False)
        self.loss = Parameter(Tensor(np.zeros(4, np.float32)), name="grad_freeze.loss", requires_grad=False)
        self.frozen_at = Parameter(Tensor(np.zeros(self.groups, np.int32)), name="grad_freeze.frozen_at",
                                   requires_grad=False)
        self.evidence = Parameter(Tensor(np.zeros((self.groups, self.groups + 3), np.float32)),
                                  name="grad_freeze.evidence", requires_grad=False)
        self.levels = Tensor(np.arange(self.groups, dtype=np.int32))
        self.head = _int32(self.groups - 1)
        self.zero = Tensor(0.0, mstype.float32)
        self.one = Tensor(1.0, mstype.float32)
        self.no_loss = Tensor(np.zeros(2, np.float32))
        self.hyper_map = ops.HyperMap()
        watched = self.groups if plan.criterion.head_ratio > 0 else self.groups - 1
        segments = [[w for w in weights if self.segment_of[id(w)] == g] for g in range(watched)]
        self.watched_segments = tuple(g for g, segment in enumerate(segments) if segment)
        self.segment_weights = tuple(ParameterTuple(segments[g]) for g in self.watched_segments)
        self.snapshot = ParameterTuple(
            Parameter(Tensor(np.concatenate([w.asnumpy().astype(np.float32).ravel() for w in segments[g]])),
                      name=f"grad_freeze.snapshot.{g}", requires_grad=False) for g in self.watched_segments)

    def fit(self, plan):
        """Follow ``plan`` (the same groups, made for another run length: ``FreezePlan.for_run``). Its interval and
        warm-up are constants of the compiled step, so fit before the first step."""
        self.plan = plan
        self.trained_from = plan.trained_from
        self.frozen_levels = plan.frozen_levels
        self.interval = plan.criterion.interval
        self.warmup = plan.criterion.warmup
        self.threshold = 0.0 if self.normalised_by else plan.criterion.threshold
        self.head_ratio = plan.criterion.head_ratio
        self.loss_drop = plan.criterion.loss_drop
        self.last_fall = plan.criterion.last_fall
        self.tracks_loss = self.loss_drop > 0 or self.last_fall < 1
        self.interval_end = self.warmup % self.interval  # updates % interval where every interval ends

    def train_from(self):
        return self.frozen + 0

    def _displacements(self):
        """Per segment, ``|w - s| / |w|`` over its weights per 100 updates (0 for a segment without weights, and for
        the head without ``head_ratio``), float32 (groups,); then the copies are taken again. Returns
        ``(displacements, token)``."""
        values, taken = [self.zero] * self.groups, ()
        for index, (weights, snapshot) in enumerate(zip(self.segment_weights, self.snapshot)):
            flat = flatten(self.hyper_map, weights)
            moved = ops.sqrt(ops.reduce_sum(ops.square(flat - snapshot)))
            size = ops.maximum(ops.sqrt(ops.reduce_sum(ops.square(flat))), 1e-30)
            values[self.watched_segments[index]] = moved / size * (100.0 / self.interval)
            taken += (ops.assign(snapshot, ops.depend(flat, moved)),)
        return ops.stack(values), taken

    def _quiet(self, displacement):
        """Per segment, whether ``displacement`` (float32, (groups,)) is below the threshold or below
        ``head_ratio`` times the head's."""
        return displacement < ops.maximum(displacement[self.groups - 1] * self.head_ratio, self.threshold)

    def advance(self, applied, loss=None):
        updates, summed, token = self._count(applied, loss)
        if ops.logical_and(applied > 0, updates % self.interval == self.interval_end):
            token = ops.depend(token, self._decide(updates, summed))
        return token

    def count(self, applied, loss=None):
        """``advance`` without the decision: count the updates and the training loss (graph). The host route's steps
        count, and the route takes the decision itself at the same updates (``decide_now``), so a step between
        decisions compiles and runs no branch."""
        return self._count(applied, loss)[2]

    def _count(self, applied, loss):
        """The updates applied and the interval's loss sum (None without a loss condition) after this step, assigned;
        ``(updates, summed, token)``."""
        updates = ops.assign_add(self.updates, applied)
        token = updates
        summed = None
        if self.tracks_loss:
            summed = ops.assign_add(self.loss_sum, self._loss_counted(loss))
            token = ops.depend(token, summed)
        return updates, summed, token

    def decides_after(self, updates):
        """The least update count above ``updates`` after which a decision is taken (host int): the next interval's
        end."""
        return updates + 1 + (self.interval_end - updates - 1) % self.interval

    def decide_now(self):
        """The decision on the counted updates and loss sum, as ``advance`` takes it in the step's graph: for the host
        route, which calls it right after the step that applied a decision's update (``decides_after``), op by op,
        outside any graph. Compiled as a graph of its own, the decision cost 1.3-1.4 s of compile on this machine's
        CPU (a ResNet of 29 and one of 47 weights), whether or not it then froze anything, where op by op it costs
        15-25 ms a decision; a run takes a few dozen decisions at most (the route's ``Costs.decision``)."""
        summed = self.loss_sum + 0.0 if self.tracks_loss else None
        return self._decide(self.updates + 0, summed)

    def _loss_counted(self, loss):
        """What this step adds to the interval's training-loss sum and count (float32, (2,)): its loss (the mean,
        float32) and 1 where the loss is finite, zeros where not. A float32 scalar loss is its own mean: no kernel."""
        value = loss
        if loss.ndim > 0 or loss.dtype != mstype.float32:
            value = ops.reduce_mean(ops.cast(loss, mstype.float32))
        return ops.select(ops.isfinite(value), ops.stack([value, self.one]), self.no_loss)

    def _learned(self, summed):
        """Whether the training loss allows a front to have settled: it lies ``loss_drop`` of the first interval's
        mean below it (the network has learned), and it fell over the last interval by at most ``last_fall`` of its
        whole fall since the first (it has levelled off; not before a second interval), each where asked for. The
        interval's mean comes from ``summed`` (its sum and count); an interval without a finite loss allows nothing.
        Returns ``(allowed, means, token)``: the first, this and the previous interval's means (float32, (3,)),
        recorded in ``loss``, and the next interval's sum started."""
        if self.all_reduce is not None:  # every rank's losses, so every rank decides alike
            summed = self.all_reduce(summed)
        counted = summed[1] > 0
        mean = summed[0] / ops.maximum(summed[1], 1.0)
        known = self.loss[2] > 0
        first = ops.select(known, self.loss[0], mean)
        previous = ops.select(known, self.loss[1], mean)
        allowed = counted
        if self.loss_drop > 0:
            allowed = ops.logical_and(allowed, first - mean >= self.loss_drop * ops.abs(first))
        if self.last_fall < 1:
            allowed = ops.logical_and(ops.logical_and(allowed, known),
                                      previous - mean <= self.last_fall * (first - mean))
        intervals = self.loss[2] + ops.cast(counted, mstype.float32)
        token = ops.assign(self.loss, ops.select(counted, ops.stack([first, mean, intervals, previous]), self.loss))
        means = ops.stack([first, mean, previous])
        return allowed, means, ops.depend(ops.assign(self.loss_sum, ops.zeros((2,), mstype.float32)), token)

    def _decide(self, updates, summed):
        displacement, taken = self._displacements()
        previous = self.displacement + 0.0
        settled = ops.logical_and(ops.logical_and(self._quiet(displacement), previous >= 0.0), self._quiet(previous))
        # The settled front reaches the first front segment from ``frozen`` on that has not settled (the head's level
        # when all has); the deepest allowed level within that reach freezes, if deeper than ``frozen``.
        unsettled = ops.logical_and(ops.logical_not(settled),
                                    ops.logical_and(self.levels >= self.frozen, self.levels < self.head))
        reach = ops.reduce_min(ops.select(unsettled, self.levels, ops.fill(mstype.int32, (self.groups,),
                                                                           self.groups - 1)))
        candidates = ops.logical_and(self.allowed, self.levels <= reach)
        deepest = ops.reduce_max(ops.select(candidates, self.levels, ops.zeros((self.groups,), mstype.int32)))
        may_freeze = updates >= self.warmup
        means = ops.stack([self.loss[0], self.loss[1], self.loss[3]])
        if self.tracks_loss:
            learned, means, counted = self._learned(summed)
            may_freeze = ops.logical_and(may_freeze, learned)
            taken += (counted,)
        front = ops.select(may_freeze, ops.maximum(deepest, self.frozen), self.frozen + 0)
        recorded = self._record_freeze(front, updates, ops.concat([displacement, means]))
        frozen = ops.assign(self.frozen, ops.depend(front, taken + (recorded,)))
        return ops.depend(frozen, ops.assign(self.displacement, displacement))

    def _record_freeze(self, front, updates, evidence):
        """For each level this decision freezes (above ``frozen``, up to ``front``): the update (``frozen_at``) and
        the ``evidence`` (float32, (groups + 3,): each segment's displacement, the training loss's three means)."""
        newly = ops.logical_and(self.levels > self.frozen, self.levels <= front)
        at = ops.assign(self.frozen_at, ops.select(newly, ops.fill(mstype.int32, (self.groups,), updates),
                                                   self.frozen_at))
        rows = ops.select(ops.tile(newly.reshape((-1, 1)), (1, self.groups + 3)),
                          ops.tile(evidence.reshape((1, -1)), (self.groups, 1)), self.evidence)
        return ops.depend(at, ops.assign(self.evidence, rows))

    def one_level(self):
        """The levels allowed without the host: the whole front's alone (bool, (groups,))."""
        return np.arange(self.groups) == self.groups - 1

    def allow(self, levels):
        """Let the decisions freeze to the levels marked in ``levels`` (bool, (groups,)), written into the graph's
        Parameter (``ops.assign``) between steps."""
        ops.assign(self.allowed, Tensor(np.asarray(levels, np.bool_)))

    def allowed_levels(self):
        """The levels the decisions may freeze to (host tuple of int)."""
        return tuple(int(k) for k in np.flatnonzero(self.allowed.asnumpy()))

    def current_index(self):
        """The first group the next step trains (host int)."""
        return int(self.frozen.asnumpy())

    def frozen_for_good(self):
        """The leading groups frozen for good (host int)."""
        return int(self.frozen.asnumpy())

    def applied_updates(self):
        """The optimizer updates applied so far (host int)."""
        return int(self.updates.asnumpy())

    def level_changes_at(self, updates):
        """The least update count above ``updates`` after which a decision may freeze more (host int): the next
        interval's end from the warm-up on; None once the whole front is frozen."""
        if self.frozen_for_good() >= self.groups - 1:
            return None
        return max(self.decides_after(updates), self.warmup)  # the warm-up's end is a decision's update too

    def monitor_state(self):
        """For ``BoostMonitor``: each segment's displacement at the last decision; with ``loss_drop``, the share by
        which the last interval's mean training loss lies below the first's, and with ``last_fall`` below 1, the
        share of that whole fall that the last interval accounts for (each None before two intervals)."""
        state = {"freeze_displacement": [round(float(d), 6) for d in self.displacement.asnumpy()]}
        first, last, intervals, previous = (float(value) for value in self.loss.asnumpy())
        if self.loss_drop > 0:
            fell = self.plan.criterion.loss_fell(first, last)
            state["freeze_loss_drop"] = round(fell, 4) if intervals > 1 and fell is not None else None
        if self.last_fall < 1:
            share = self.plan.criterion.last_fall_share(first, last, previous)
            state["freeze_loss_last_fall"] = round(share, 4) if intervals > 1 and share is not None else None
        return state


# Optimizer families whose step per weight is normalised (by a running root mean square of the gradient, its sign,
# or a layer's trust ratio), matched in the lower-cased class names of the optimizer's type and its bases: Adam and
# its kin (AdamW, AdamWeightDecay, LazyAdam, AdaMax, NAdam, Adan), AdaFactor, Adagrad, Adadelta, Lamb, RMSProp,
# Rprop, FTRL, LARS, Lion.
NORMALISED_STEPS = ("ada", "lamb", "rmsprop", "rprop", "ftrl", "lars", "lion")


def normalised_steps(optimizer):
    """The optimizer's class name (the first of its type and bases, in order) that marks it as one whose step per
    weight is normalised (``NORMALISED_STEPS``), or None."""
    return next((kind.__name__ for kind in type(optimizer).__mro__
                 if any(family in kind.__name__.lower() for family in NORMALISED_STEPS)), None)


def make_schedule(freeze_opt, info=None):
    """The schedule of a ``FreezeOpt``'s plan: an ``AutoSchedule`` over its segments for an "auto" plan (told
    whether its optimizer normalises its steps, and data-parallel (``info``, a ``ParallelInfo``) to sum the training
    loss over the ranks), else a ``SequenceSchedule``."""
    plan = freeze_opt.plan
    if plan.kind != "auto":
        return SequenceSchedule(plan)
    return AutoSchedule(plan, freeze_opt.segment_of(), freeze_opt.optimizer.parameters,
                        normalised_by=normalised_steps(freeze_opt.optimizer),
                        ranks_loss=info is not None and info.distributed)
