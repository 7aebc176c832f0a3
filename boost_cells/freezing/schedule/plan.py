"""The freezing plan: what a freezing schedule does over a run, derived once, in plain Python.

A ``FreezePlan`` is immutable. ``FreezePlan.from_section`` builds it from a ``grad_freeze`` config section and the
run's length in updates; ``FreezePlan.from_sequence`` from the sequence a ``FreezeOpt`` was given. Every other part
reads it: the schedule cells take their tables and constants from it (``schedules``), the train cell fits it to a
run (``in_run``), and ``boost_cells.explain``, ``Model.train``'s log and every warning describe it (``run_differs``:
what a plan made for another run length does in a run). So a rule of a
schedule (when it first freezes, which groups it freezes for good) is written here and nowhere else.

Updates are counted as the schedule counts them: ``update`` is the number of optimizer updates applied before the
one in question (from 0), so ``train_from(0)`` is the first update's first trained group; the ``first_*`` facts are
1-based update numbers, as people count them ("update 159 of 528").
"""
import bisect
import dataclasses
import functools
import math
from types import MappingProxyType

from .sequences import (CONTINUOUS, INTERVAL, PROGRESSIVE, continuous_cycle, freeze_index_sequence, is_automatic,
                        progressive_index, sequence_length)

__all__ = ["AutoCriterion", "FreezePlan", "auto_criterion", "run_differs"]

_KINDS = MappingProxyType({CONTINUOUS: "continuous", INTERVAL: "interval", PROGRESSIVE: "progressive"})


@dataclasses.dataclass(frozen=True)
class AutoCriterion:
    """The automatic schedule's constants, in optimizer updates (``auto_criterion`` derives them from the config's
    shares of the run).

    Attributes:
        interval (int): updates between two decisions, >= 1.
        warmup (int): updates before the first freeze, >= 0: the least share of the run trained whole.
        threshold (float): > 0, the displacement of a segment's weights per 100 updates, against their size,
            below which the segment has settled.
        head_ratio (float): in [0, 1]; a segment has also settled when its displacement is below this share of
            the head's (0: the threshold alone decides).
        loss_drop (float): in [0, 1); nothing freezes until the training loss's mean over the last interval lies
            at least this share below its mean over the first (``first - last >= loss_drop * |first|``): a network
            that has not yet learned (the whole of it on a plateau, at chance) has no front that settled. 0: no
            such condition.
        last_fall (float): in [0, 1]; nothing freezes while the training loss's mean fell over the last interval by
            more than this share of its whole fall since the first (``previous - last <= last_fall * (first -
            last)``): a loss still falling steeply is a task still being learned (a new head adapting to a
            pretrained front). 1: no such condition.
    """

    interval: int
    warmup: int
    threshold: float
    head_ratio: float = 0.0
    loss_drop: float = 0.0
    last_fall: float = 1.0

    @staticmethod
    def loss_fell(first, last):
        """The share by which the interval's mean training loss ``last`` lies below the first interval's ``first``
        (what ``loss_drop`` bounds), or None where ``first`` is 0."""
        return (first - last) / abs(first) if first else None

    @staticmethod
    def last_fall_share(first, last, previous):
        """The share of the loss's whole fall since the first interval (``first - last``) that the last interval
        made (``previous - last``; what ``last_fall`` bounds), or None where there was no fall to share."""
        whole = first - last
        return (previous - last) / whole if whole else None


def auto_criterion(total_steps, interval_share, warmup_share, threshold, head_ratio=0.0, loss_drop=0.0,
                   last_fall=1.0):
    """The automatic schedule's ``AutoCriterion`` for a run of ``total_steps`` updates: a decision every
    ``max(1, round(interval_share * total_steps))`` updates, none that freezes before ``ceil(warmup_share *
    total_steps)`` updates."""
    return AutoCriterion(interval=max(1, round(interval_share * total_steps)),
                         warmup=math.ceil(round(warmup_share * total_steps, 9)), threshold=float(threshold),
                         head_ratio=float(head_ratio), loss_drop=float(loss_drop), last_fall=float(last_fall))


@dataclasses.dataclass(frozen=True)
class FreezePlan:
    """What a freezing schedule does over a run of ``total_steps`` updates.

    Attributes:
        kind (str): "continuous", "interval", "progressive", "auto" (the config's ``freeze_type`` 0 to 3) or "given"
            (a sequence given to ``FreezeOpt``).
        groups (int): the number of train groups, >= 1.
        total_steps (int): the run length, in updates, the plan is made for.
        sequence (tuple of int): for every kind but "auto", the first trained group of each update, walked from
            the first entry; () for "auto", which decides while training.
        cyclic (bool): after the sequence's last entry, start again at its first (else stay at the last).
        criterion (AutoCriterion): the automatic schedule's constants; None for the other kinds.
        section (Mapping): the ``grad_freeze`` section it was made from; None for a given sequence.
        run_assumed (bool): ``total_steps`` was not given (the section's default, 65536, is assumed) and no run has
            fitted the plan yet (``in_run``).
    """

    kind: str
    groups: int
    total_steps: int
    sequence: tuple = ()
    cyclic: bool = True
    criterion: AutoCriterion = None
    section: object = dataclasses.field(default=None, compare=False, repr=False)
    run_assumed: bool = dataclasses.field(default=False, compare=False)

    @classmethod
    def from_section(cls, section, total_steps=None, run_assumed=False):
        """The plan of a ``grad_freeze`` section for a run of ``total_steps`` updates (default: the section's
        ``total_steps``); ``run_assumed``: that length was not given but assumed."""
        total = int(section["total_steps"] if total_steps is None else total_steps)
        groups, freeze_type = int(section["param_groups"]), section["freeze_type"]
        if is_automatic(freeze_type):
            criterion = auto_criterion(total, section["auto_interval_share"], section["auto_warmup_share"],
                                       section["auto_threshold"], section["auto_head_ratio"],
                                       section["auto_loss_drop"], section["auto_loss_last_fall"])
            return cls("auto", groups, total, criterion=criterion, section=section, run_assumed=run_assumed)
        sequence = freeze_index_sequence(groups, freeze_type, section["freeze_p"], total, section["seed"])
        return cls(_KINDS[freeze_type], groups, total, tuple(sequence), freeze_type != PROGRESSIVE, section=section,
                   run_assumed=run_assumed)

    @classmethod
    def from_sequence(cls, sequence, groups, cyclic=True):
        """The plan of a sequence given to ``FreezeOpt`` (its ``train_strategy``), which no run changes."""
        sequence = tuple(int(index) for index in sequence)
        return cls("given", int(groups), len(sequence), sequence, bool(cyclic))

    def in_run(self, updates):
        """The plan a run of ``updates`` updates trains under, by the one rule the train cell (``fit_to_run``) and
        ``explain`` share: made for the run where its length was assumed (``run_assumed``: the config left
        ``total_steps`` out and no run fitted it yet), else this plan (a given ``total_steps``, or one an earlier run
        fitted, stays: ``run_differs`` says what it then does in this run)."""
        return self.for_run(updates) if self.run_assumed else self

    def for_run(self, updates):
        """This plan made for a run of ``updates`` updates, as ``Model.train`` fits a schedule whose config leaves
        ``total_steps`` out; itself when the schedule does not depend on the run's length."""
        if not self.depends_on_run or (updates == self.total_steps and not self.run_assumed):
            return self
        return FreezePlan.from_section(self.section, updates)

    @functools.cached_property
    def depends_on_run(self):
        """Whether the run's length changes what the schedule does: the automatic schedule with more than one group,
        an interval or progressive schedule that freezes at all (more than one group, ``freeze_p`` below 1); never a
        continuous cycle or a given sequence."""
        if self.section is None or self.groups < 2:
            return False
        return self.kind == "auto" or (self.kind in ("interval", "progressive") and self.section["freeze_p"] < 1)

    @functools.cached_property
    def floors(self):
        """Per sequence entry, the leading groups no later update trains: the running minimum from the end for a
        sequence walked once, the sequence's minimum everywhere for a cyclic one."""
        if self.cyclic:
            return (min(self.sequence),) * len(self.sequence) if self.sequence else ()
        floors = list(self.sequence)
        for t in range(len(floors) - 2, -1, -1):
            floors[t] = min(floors[t], floors[t + 1])
        return tuple(floors)

    @functools.cached_property
    def trained_from(self):
        """Every first trained group an update can have without the host: the freezing switch compiles these. The
        automatic schedule has two: every group, and the head alone (without the host it freezes the whole front at
        once; its other levels are the host route's, ``frozen_levels``)."""
        if self.kind == "auto":
            return tuple(sorted({0, self.groups - 1}))
        return tuple(sorted(set(self.sequence)))

    @functools.cached_property
    def frozen_levels(self):
        """Every number above 0 of leading groups frozen for good the schedule can reach: the host route builds a
        step for each (compiled when first taken). The automatic schedule reaches the whole front's level alone, or
        with ``payback`` every level the run's measured costs allow (``payback``)."""
        if self.kind == "auto":
            return tuple(range(1 if self.payback else self.groups - 1, self.groups))
        return tuple(sorted(set(self.floors) - {0}))

    @property
    def payback(self):
        """Whether the run's measured costs decide the automatic schedule's levels (``grad_freeze.payback``)."""
        return self.kind == "auto" and bool(self.section["payback"])

    def position(self, update):
        """The sequence entry of ``update`` (updates applied before it, from 0)."""
        if self.cyclic:
            return update % len(self.sequence)
        return min(update, len(self.sequence) - 1)

    def train_from(self, update):
        """The first group ``update`` (from 0) trains; None for the automatic schedule, which decides while
        training (never from a group above 0 before ``first_frozen_update``)."""
        return None if self.kind == "auto" else self.sequence[self.position(update)]

    def frozen_for_good(self, update):
        """The leading groups that neither ``update`` (from 0) nor any later one trains; None for the automatic
        schedule."""
        return None if self.kind == "auto" else self.floors[self.position(update)]

    @functools.cached_property
    def first_frozen_update(self):
        """The first update (from 1) that may train from a group above 0: the first such entry of the sequence, or
        for the automatic schedule the one after its first decision that may freeze (at the end of the warm-up, and
        not before its second decision: a group settles over two intervals); None when none can."""
        if self.kind == "auto":
            if self.groups < 2:
                return None
            interval, warmup = self.criterion.interval, self.criterion.warmup
            second = (warmup % interval or interval) + interval
            return max(warmup, second) + 1
        return next((t + 1 for t, index in enumerate(self.sequence) if index > 0), None)

    @property
    def freezes(self):
        """Whether some update trains from a group above 0."""
        return self.first_frozen_update is not None

    @property
    def freezes_for_good(self):
        """Whether front groups freeze for good (what the frozen-prefix cache needs)."""
        return bool(self.frozen_levels)

    @property
    def may_cache(self):
        """Whether the frozen-prefix cache can serve steps under this plan: asked for (``cache_frozen_prefix``), under
        a schedule that freezes groups for good, the automatic one for "auto". Whether it does in a cell is the
        network's and the cell's to say too (its stages, its own ``construct``, no ``dim_reduce``: ``steps``)."""
        asked = None if self.section is None else self.section["cache_frozen_prefix"]
        return bool(asked) and self.freezes_for_good and (asked is True or self.kind == "auto")

    @property
    def host_route(self):
        """Whether the frozen levels' steps are taken on the host, each compiled when first taken (the route): with
        payback (more than one group), or where the cache may serve. The one answer ``steps`` builds the route by
        and ``explain`` reads."""
        return self.payback and self.groups > 1 or self.may_cache

    @functools.cached_property
    def stage_starts(self):
        """``((k, first update from group k on), ...)`` (1-based updates) for each level ``k >= 1`` a sequence walked
        once reaches for good; () for cyclic sequences and the automatic schedule."""
        if self.kind == "auto" or self.cyclic:
            return ()
        return tuple((level, bisect.bisect_left(self.floors, level) + 1) for level in self.frozen_levels)

    def decides_after(self, update):
        """Whether the automatic schedule decides after ``update`` updates (from 1) were applied: at the end of
        every interval, the first that may freeze ending exactly at the warm-up."""
        criterion = self.criterion
        return update % criterion.interval == criterion.warmup % criterion.interval

    @property
    def continuous_cycle(self):
        """The continuous schedule's repeated cycle (``continuous_cycle``); None for the other kinds."""
        if self.kind != "continuous":
            return None
        return tuple(continuous_cycle(self.groups, self.section["freeze_p"]))

    @property
    def length(self):
        """The sequence's length (``int(total_steps * 1.01)`` entries for a config's sequence); 0 for "auto"."""
        return len(self.sequence) if self.kind != "auto" else 0

    @staticmethod
    def sequence_length(total_steps):
        """The length of a sequence drawn for ``total_steps`` updates (``sequence_length``)."""
        return sequence_length(total_steps)


def _first_frozen(freeze):
    """The first update (from 0) of a sequence that trains from a group above 0, or None."""
    return None if freeze.first_frozen_update is None else freeze.first_frozen_update - 1


def _progressive_in_run(freeze, updates):
    """What a progressive plan made for ``freeze.total_steps`` updates does in a run of ``updates``."""
    start, deepest = _first_frozen(freeze), freeze.sequence.index(max(freeze.sequence))
    stage = f"its deepest stage (training from group {max(freeze.sequence)} on)"
    what = "The progressive schedule "
    if start is None or start >= updates:
        trained = freeze.length if start is None else start
        what += f"trains every group for its first {trained} updates, so freezing never starts in this run."
    elif deepest >= updates:
        what += f"starts freezing at update {start + 1}, but the run ends before {stage}, from update {deepest + 1}."
    elif freeze.total_steps < updates:
        what += (f"starts freezing at update {start + 1} and reaches {stage} at update {deepest + 1}, so the run's "
                 f"last {updates - deepest} updates all train that stage.")
    else:
        what += f"starts freezing at update {start + 1} and reaches {stage} at update {deepest + 1}."
    fitted = freeze.for_run(updates).first_frozen_update
    if fitted is not None:
        what += f" Drawn for {updates} updates, it would start freezing at update {fitted}."
    return what


def _interval_in_run(freeze, updates):
    """What an interval plan made for ``freeze.total_steps`` updates does in a run of ``updates``."""
    length, start = freeze.length, _first_frozen(freeze)
    drawn = f"int({freeze.total_steps} * 1.01) = {length}"
    if start is None:
        return f"Its interval sequence of {drawn} updates freezes nothing, so freezing never starts."
    what = (f"Freezing starts at update {start + 1} all the same (the interval schedule freezes about 1 - freeze_p = "
            f"{1 - freeze.section['freeze_p']:g} of the steps from the start), but ")
    if length < updates:
        return what + (f"its sequence of {drawn} updates is shorter than the run: after update {length} it starts "
                       f"again from its first entry, so the run repeats the same pattern of frozen steps "
                       f"{updates / length:.1f} times.")
    return what + f"the run uses only the first {updates} of its {drawn} entries."


def _every(interval):
    """"every update" or "every N updates"."""
    return "every update" if interval == 1 else f"every {interval} updates"


def _automatic_in_run(freeze, updates):
    """What the automatic plan made for ``freeze.total_steps`` updates does in a run of ``updates``."""
    fitted = freeze.for_run(updates)
    first = freeze.first_frozen_update
    what = (f"The automatic schedule decides {_every(freeze.criterion.interval)} and freezes nothing before update "
            f"{first}")
    if first > updates:
        what += ", so freezing never starts in this run."
    else:
        share = freeze.section["auto_warmup_share"]
        what += f", {(first - 1) / updates:.0%} into this run rather than {share:.0%}."
    return what + (f" Made for {updates} updates, it would decide {_every(fitted.criterion.interval)} from update "
                   f"{fitted.first_frozen_update}.")


def run_differs(freeze, updates):
    """What the freezing plan ``freeze`` (made for ``freeze.total_steps`` updates) does in a run of ``updates``
    updates, in words: when freezing starts in this run and when it would start if made for the run; None when the
    two agree or the schedule does not depend on the run's length (``FreezePlan.depends_on_run``)."""
    if not freeze.depends_on_run or freeze.total_steps == updates:
        return None
    if freeze.kind == "auto":
        return _automatic_in_run(freeze, updates)
    if freeze.kind == "progressive":
        return _progressive_in_run(freeze, updates)
    return _interval_in_run(freeze, updates)
