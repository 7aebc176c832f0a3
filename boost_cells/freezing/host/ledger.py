"""The ledger of a run's measured costs per frozen level, which the payback rules read (``payback``).

A step is timed from the start of one train-cell call to the start of the next, on the host: the wall time the run
spends per step, data loading included, which no asynchronous launch hides (the next call waits for the step before
it). A level's first step holds its compile too. Each level has two rows: its steps on the batch, and its steps on
the frozen-prefix cache's outputs that the cache served whole (no sample computed), which the cache's own judgement
compares (``cached_row``). The ledger keeps both in Parameters, so a checkpoint holds them and
a resumed run decides from the times the interrupted one measured: a level timed before is not timed again from
scratch, and its compile counts as paid. It also keeps what the schedule's decisions cost the host route that takes
them (``record_decision``), which payback counts against the levels that keep them coming.

A step reads and writes nothing on the device for the ledger: it appends its time to a list, which the host mirror
(numpy) folds in when read, and the ledger writes the mirror to its Parameters at ``sync`` (the route syncs at every
weighing, so a checkpoint taken after a weighing holds every figure that weighing used; one taken between two
weighings lacks the steps timed since, which a resumed run times again) and reads back from them at the first step
of a run (``load``: a checkpoint loaded into a new cell before training).
"""
import time

import numpy as np
from mindspore import Parameter, Tensor, nn

from .held_view import HeldView
from .payback import Costs

__all__ = ["CostLedger", "window_median"]


def window_median(values):
    """The median of ``values`` (float32, (n,), n >= 1) as a float32, equal bit for bit to ``np.median``'s: the
    middle value, or the float32 mean of the two middle values. Sorted as Python floats (a float32 converts exactly):
    on a window of a few values, ``np.median``'s general machinery costs about 25 us a call between two steps."""
    ordered = sorted(values.tolist())
    middle = len(ordered) // 2
    if len(ordered) % 2:
        return np.float32(ordered[middle])
    return (np.float32(ordered[middle - 1]) + np.float32(ordered[middle])) / np.float32(2)


class CostLedger(nn.Cell):
    """Measured seconds of a run's steps at each frozen level, and of each level's first step (its compile).

    Args:
        levels (int): the levels measured, ``0 .. levels - 1`` (0: the full step; the groups of the schedule).
        clock (callable): seconds as a float, increasing (default ``time.perf_counter``); tests set their own.

    Parameters (state, checkpointed), one row a level on the batch (row ``k``) and one a level on the cache's
    outputs (row ``cached_row(k)``):
        grad_freeze.ledger.first_step (float32, (2 * levels,)): seconds of each row's first step (for a level on the
            batch: its compile and one step), -1 before it ran.
        grad_freeze.ledger.steps (float32, (2 * levels, WINDOW)): each row's last ``WINDOW`` step times after its
            first, seconds; step ``n`` of a row at column ``n % WINDOW``.
        grad_freeze.ledger.timed (int32, (2 * levels,)): the steps timed in each row after its first.
        grad_freeze.ledger.repeats (int32, ()): whether the samples repeat from epoch to epoch (1) or not (0), as the
            frozen-prefix cache's probe measured; -1 before.
        grad_freeze.ledger.decisions (float32, (3,)): the seconds the schedule's decisions taken by the host route
            cost (``record_decision``): the first's (-1 before it), then the later ones' summed, and how many.
    """

    WINDOW = 16  # step times kept per level: their median is the level's step time
    MIN_TIMED = 3  # steps timed after the first before a level's step time is known
    MIRRORED = ("first_step", "steps", "timed", "repeats", "decisions")  # the Parameters the host mirror holds

    def __init__(self, levels, clock=time.perf_counter):
        super().__init__(auto_prefix=False)
        self.levels = int(levels)
        self.clock = clock
        rows = 2 * self.levels
        self.first_step = Parameter(Tensor(-np.ones(rows, np.float32)), name="grad_freeze.ledger.first_step",
                                    requires_grad=False)
        self.steps = Parameter(Tensor(np.zeros((rows, self.WINDOW), np.float32)), name="grad_freeze.ledger.steps",
                               requires_grad=False)
        self.timed = Parameter(Tensor(np.zeros(rows, np.int32)), name="grad_freeze.ledger.timed", requires_grad=False)
        self.repeats = Parameter(Tensor(np.array(-1, np.int32)), name="grad_freeze.ledger.repeats", requires_grad=False)
        self.decisions = Parameter(Tensor(np.array([-1.0, 0.0, 0.0], np.float32)),
                                   name="grad_freeze.ledger.decisions", requires_grad=False)
        # [row or None, clock reading] of the call being timed (row None: none yet, or one not recorded); host only,
        # changed in place between steps (setting a Cell attribute runs MindSpore's checks, a few microseconds)
        self._started = [None, 0.0]
        self._mirror = None  # the host mirror {name: numpy array} of the Parameters, from the run's first step
        self._views = {name: HeldView(getattr(self, name)) for name in self.MIRRORED}  # ``sync`` writes through them
        self._pending = []  # (row, seconds) recorded since the mirror was last brought up to date, in order

    def _table(self):
        """The host mirror, read from the Parameters at its first use (a checkpoint loaded before training), with
        the steps recorded since its last use folded in."""
        if self._mirror is None:
            self._mirror = {name: getattr(self, name).asnumpy().copy() for name in self.MIRRORED}
        if self._pending:
            self._fold()
        return self._mirror

    def _fold(self):
        """Bring the mirror up to date with the steps recorded since (``record``), in their order: a row's first
        step if none was recorded, then its step times into the row's window of the last ``WINDOW``."""
        by_row = {}
        for row, seconds in self._pending:
            by_row.setdefault(row, []).append(seconds)
        self._pending.clear()  # in place: setting a Cell attribute runs MindSpore's checks
        first, steps, timed = self._mirror["first_step"], self._mirror["steps"], self._mirror["timed"]
        for row, times in by_row.items():
            if first[row] < 0:
                first[row], times = times[0], times[1:]
            if not times:
                continue
            kept = times[-self.WINDOW:]
            column = (int(timed[row]) + len(times) - len(kept)) % self.WINDOW
            head = min(len(kept), self.WINDOW - column)  # kept[:head] up to the window's end, the rest from 0
            steps[row, column:column + head] = kept[:head]
            steps[row, :len(kept) - head] = kept[head:]
            timed[row] += len(times)

    def load(self):
        """Read the host mirror from the Parameters again at its next use (a run's first step: a checkpoint may have
        been loaded since the ledger was built); steps recorded and not written are dropped with it."""
        self._mirror, self._pending = None, []

    def sync(self):
        """Write the host mirror to the Parameters (a checkpoint then holds every figure recorded so far), in place
        (``HeldView``: about a microsecond an array). A checkpoint loaded into the Parameters before a run is read at
        ``load``, as the route does at a run's first step."""
        if self._mirror is None and not self._pending:
            return
        for name, array in self._table().items():
            self._views[name].write(array)

    def samples_repeat(self):
        """Whether the run's samples repeat from one epoch to the next, as measured (``record_repeats``); None
        before."""
        value = int(self._table()["repeats"])
        return None if value < 0 else bool(value)

    def record_repeats(self, repeat):
        """Record whether the run's samples repeat (the frozen-prefix cache's probe)."""
        self._table()["repeats"] = np.array(int(repeat), np.int32)

    def record_decision(self, seconds):
        """Record one of the schedule's decisions that the host route took, of ``seconds``: the first apart, as it
        holds what runs once (each op's first call: 39 ms against 23 ms for the later ones, on the compute-bound
        ResNet here), the later ones summed."""
        decisions = self._table()["decisions"]
        if decisions[0] < 0:
            decisions[0] = seconds
        else:
            decisions[1:] += np.array([seconds, 1.0], np.float32)

    def cached_row(self, level):
        """The row of level ``level``'s steps on the cache's outputs."""
        return self.levels + level

    def start(self, row):
        """A step recorded in ``row`` (a level, or ``cached_row``) starts now: the step before it, if any, ends here
        and is recorded."""
        now, started = self.clock(), self._started
        if started[0] is not None:
            self.record(started[0], now - started[1])
        started[0], started[1] = row, now

    def restart(self):
        """The step that started last starts again now: what ran since (the cache's probe, host work that serves
        the cache and not the step) is timed as neither this step nor the one before."""
        self._started[1] = self.clock()

    def count_as(self, row):
        """Record the step that started last in ``row`` instead (None: not at all), once the call knows what it
        ran (a cached step that computed samples is neither row's)."""
        self._started[0] = row

    def record(self, row, seconds):
        """Record a step of ``seconds`` in ``row``: its first step if none was recorded, else one more step time.
        A list append and nothing more, as it runs between two steps, where on a launch-bound run a few numpy scalar
        writes cost tens of microseconds; the mirror folds it in at its next read (``_table``), and ``sync`` writes
        the mirror to the Parameters."""
        self._pending.append((row, seconds))

    def summary(self):
        """float32 (2, 2 * levels + 1): each row's median step time and its compile (its first step less that median,
        or the whole first step while the median is unknown), seconds; then, in the last column's first row, the
        mean seconds of the decisions the route took after its first; -1 where unknown."""
        table = self._table()
        first, timed, steps = table["first_step"], table["timed"], table["steps"]
        summary = np.full((2, len(timed) + 1), -1.0, np.float32)
        zero = np.float32(0)
        for row, count in enumerate(timed.tolist()):  # Python scalars: a few rows, numpy's per-call cost dominates
            if count >= self.MIN_TIMED:
                summary[0, row] = window_median(steps[row, :min(count, self.WINDOW)])
            if first[row] >= 0:
                summary[1, row] = max(zero, first[row] - max(summary[0, row], zero))
        _, seconds, taken = table["decisions"]
        if taken > 0:  # the float32 mean
            summary[0, -1] = seconds / taken
        return summary

    def costs(self, summary, shares, decision_every=0):
        """The ``Costs`` of a ``summary`` (or the mean of the ranks' summaries), with the layer ``shares`` and the
        calls between two of the decisions the route takes (``Costs.decision_every``)."""
        median, compile_seconds = summary[:, :self.levels].tolist()
        cached = summary[0, self.levels:2 * self.levels].tolist()
        decision = float(summary[0, -1])
        return Costs(step={k: s for k, s in enumerate(median) if s >= 0},
                     compile={k: c for k, c in enumerate(compile_seconds) if c >= 0}, shares=tuple(shares),
                     cached_step={k: s for k, s in enumerate(cached) if s >= 0},
                     decision=decision if decision >= 0 else None, decision_every=int(decision_every))
