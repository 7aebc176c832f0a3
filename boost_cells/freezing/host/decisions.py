"""The freezing decisions a run made, as records a person reads: what changed, when, why, and from which figures.

Three parts decide for themselves while a run trains: the automatic schedule (in the graph: a front segment has
settled, so a level freezes), payback (on the host: which frozen levels the steps left repay) and the frozen-prefix
cache (on the host: wait, fill, keep or drop). Each decision that changes anything becomes one ``Decision``: the
update it was made at, the part and what it did, the reason in words, and the figures it used, each marked as
measured on this run, taken from the config, or a prior (named). ``Decision.line()`` is the one line the log
shows; the train cell's ``decisions`` lists them all, in order.

The schedule's decisions are rendered from its own Parameters (``grad_freeze.frozen_at`` and
``grad_freeze.evidence``), so they hold however the cell was called and survive a checkpoint. The host's are kept
by a ``DecisionLog``, which a checkpoint holds as UTF-8 JSON in a byte Parameter (``grad_freeze.decision_log``).
"""
import dataclasses
import json
import logging

import numpy as np
from mindspore import Parameter, Tensor, nn

from .held_view import HeldView

__all__ = ["Decision", "DecisionLog", "Figure", "JsonParameter", "schedule_decisions"]

LOG = logging.getLogger("boost_cells.decisions")


@dataclasses.dataclass(frozen=True)
class Figure:
    """One figure a decision used.

    Attributes:
        name (str): what it is ("step", "compile", "displacement of segment 0", ...).
        value (float): its value, in ``unit``.
        unit (str): "s", "ms", "steps", "" (a ratio or a count).
        source (str): "measured" (on this run), "config" (a key's value, named in ``name``) or "prior: <NAME>"
            (an estimate before anything was measured, by the constant or rule named).
    """

    name: str
    value: float
    unit: str = ""
    source: str = "measured"

    def text(self):
        """``name value unit (source)``, the value with 3 significant digits (a whole number from 1000 on, never
        in exponent form: "1,330 ms", not "1.33e+03 ms")."""
        unit = f" {self.unit}" if self.unit else ""
        value = f"{self.value:,.0f}" if abs(self.value) >= 1000 else f"{self.value:.3g}"
        return f"{self.name} {value}{unit} ({self.source})"


@dataclasses.dataclass(frozen=True)
class Decision:
    """One decision that changed what the run does.

    Attributes:
        update (int): the optimizer updates applied when it was made (it takes effect from the next step).
        part (str): "schedule", "payback" or "cache".
        action (str): what changed: "froze level 2", "allowed levels 1, 2", "cache: wait", "cache: fill",
            "cache: keep", "cache: drop", "no level pays".
        reason (str): why, in words.
        figures (tuple of Figure): the figures it used.
        total (int): the run's updates, as the plan has them (0: unknown).
        warned (bool): whether it was also given as a ``BoostConfigWarning``: it leaves out a feature the config
            switched on (no level pays, the cache dropped, the route stepped aside).
    """

    update: int
    part: str
    action: str
    reason: str
    figures: tuple = ()
    total: int = 0
    warned: bool = False

    def line(self):
        """The decision as one log line: ``update 131 of 528: froze level 2: <reason>; <figures>``."""
        when = f"update {self.update}" + (f" of {self.total}" if self.total else "")
        figures = "; ".join(figure.text() for figure in self.figures)
        return f"{when}: {self.action}: {self.reason}" + (f" [{figures}]" if figures else "")

    def to_dict(self):
        """The decision as plain data (JSON)."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data):
        """The decision ``to_dict`` gave."""
        return cls(**{**data, "figures": tuple(Figure(**figure) for figure in data["figures"])})


def schedule_decisions(schedule):
    """The automatic schedule's freezes, one ``Decision`` per level it froze (a tuple, in update order), rendered
    from its Parameters: the update after which the level froze, each segment's displacement and the training loss
    at that decision (host reads; no step runs). () for any other schedule."""
    if not hasattr(schedule, "frozen_at"):
        return ()
    criterion, plan = schedule.plan.criterion, schedule.plan
    frozen_at, evidence = schedule.frozen_at.asnumpy(), schedule.evidence.asnumpy()
    decisions, groups = [], plan.groups
    for level in range(1, groups):
        if frozen_at[level] <= 0 or (level + 1 < groups and frozen_at[level + 1] == frozen_at[level]):
            continue  # not frozen, or frozen with a deeper level by the same decision (that one's record says)
        row = evidence[level]
        figures = [Figure(f"displacement of segment {segment}", float(row[segment]), "per 100 updates")
                   for segment in range(level)]
        if criterion.head_ratio > 0:
            figures.append(Figure("displacement of the head", float(row[groups - 1]), "per 100 updates"))
        if schedule.normalised_by:
            below = f"auto_head_ratio {criterion.head_ratio:g} of the head's (auto_threshold not applied: " \
                f"{schedule.normalised_by} normalises its steps)"
        else:
            figures.append(Figure("auto_threshold", criterion.threshold, "per 100 updates", "config"))
            below = "auto_threshold" + (f" or auto_head_ratio {criterion.head_ratio:g} of the head's"
                                        if criterion.head_ratio > 0 else "")
        reason = (f"segment{'s' if level > 1 else ''} {_span(level)} settled (displacement below {below}, at this "
                  "decision and the one before)")
        first, last, previous = (float(value) for value in row[groups:])
        if criterion.loss_drop > 0 or criterion.last_fall < 1:
            figures += [Figure("first interval's mean loss", first), Figure("last interval's mean loss", last)]
        if criterion.loss_drop > 0:
            fell = criterion.loss_fell(first, last) or 0.0
            figures.append(Figure("auto_loss_drop", criterion.loss_drop, "", "config"))
            reason += f"; the training loss fell {fell:.0%} from the first interval's (at least " \
                      f"{criterion.loss_drop:.0%} needed)"
        if criterion.last_fall < 1:
            share = criterion.last_fall_share(first, last, previous) or 0.0
            figures += [Figure("the interval before's mean loss", previous),
                        Figure("auto_loss_last_fall", criterion.last_fall, "", "config")]
            reason += f"; the last interval's fall was {share:.0%} of its whole fall (at most " \
                      f"{criterion.last_fall:.0%} allowed: it has levelled off)"
        decisions.append(Decision(int(frozen_at[level]), "schedule", f"froze level {level}", reason, tuple(figures),
                                  plan.total_steps))
    return tuple(decisions)


def _span(level):
    """The front segments a level freezes, in words: "0", "0-1", ..."""
    return "0" if level == 1 else f"0-{level - 1}"


class JsonParameter(nn.Cell):
    """Plain data (JSON) held for a checkpoint as UTF-8 in a byte Parameter: what the host decided, which a
    checkpoint must carry but no graph reads.

    Args:
        name (str): the Parameter's name. capacity (int): its bytes.

    Parameters (state, checkpointed):
        <name> (uint8, (capacity,)): the data as UTF-8 JSON, zero padded (``write``).
    """

    def __init__(self, name, capacity):
        super().__init__(auto_prefix=False)
        self.capacity = int(capacity)
        self.stored = Parameter(Tensor(np.zeros(self.capacity, np.uint8)), name=name, requires_grad=False)
        self._view = HeldView(self.stored)  # ``write`` writes through it, in place

    def read(self):
        """The data last written (a checkpoint's), or None where nothing was."""
        data = bytes(self.stored.asnumpy()).rstrip(b"\0")
        return json.loads(data) if data else None

    def encoded(self, data):
        """``data`` as the bytes ``write`` stores, or None where they exceed the capacity."""
        encoded = json.dumps(data).encode()
        return encoded if len(encoded) <= self.capacity else None

    def write(self, data):
        """Hold ``data`` (JSON-able; at most ``capacity`` bytes encoded, else ValueError)."""
        encoded = self.encoded(data)
        if encoded is None:
            raise ValueError(f"For '{type(self).__name__}', the data must fit {self.capacity} bytes as JSON.")
        self._view.write(np.frombuffer(encoded.ljust(self.capacity, b"\0"), np.uint8))


class DecisionLog(JsonParameter):
    """The host's decisions of a run (payback's and the cache's), kept in order, logged once each (INFO, the logger
    ``boost_cells.decisions``), and held for a checkpoint.

    Args:
        capacity (int): bytes of the checkpointed log; the oldest decisions give way where it is full.

    Parameters (state, checkpointed):
        grad_freeze.decision_log (uint8, (capacity,)): the decisions as UTF-8 JSON, zero padded (``sync``).
    """

    def __init__(self, capacity=16384):
        super().__init__("grad_freeze.decision_log", capacity)
        self._records = None  # the decisions, read from the Parameter at first use (a checkpoint loaded before)
        self._synced = 0  # records written to the Parameter so far

    @property
    def records(self):
        """The decisions kept, in order (a list of ``Decision``)."""
        if self._records is None:
            self.load()
        return self._records

    def add(self, decision):
        """Keep ``decision`` and log its line once."""
        self.records.append(decision)
        LOG.info(decision.line())

    def load(self):
        """The decisions a checkpoint held (an interrupted run's), read back before this run's first step."""
        self._records = [Decision.from_dict(item) for item in self.read() or []]
        self._synced = len(self._records)

    def sync(self):
        """Write the decisions to the Parameter, where any were added since the last sync."""
        if self._synced == len(self.records):
            return
        records = [decision.to_dict() for decision in self.records]
        while records and self.encoded(records) is None:
            records = records[1:]
        self.write(records)
        self._synced = len(self.records)
