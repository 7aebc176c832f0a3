"""A freezing schedule against the run it trains in: how many updates the run has, and what a schedule made for
another number of updates does in it.

The interval (1) and progressive (2) schedules are sequences drawn in advance for ``total_steps`` updates
(``freeze_index_sequence``: ``int(total_steps * 1.01)`` entries) and indexed by the updates applied since the
run's start (``grad_freeze.position``); the automatic one (3, "auto") decides every ``auto_interval_share`` of
``total_steps`` updates and not before ``auto_warmup_share`` of them. Only the run knows how many updates it has:
``Model.train`` counts them (``run_updates``), sets ``total_steps`` from them when the config leaves it out, and
otherwise warns (``warn_if_run_differs``) when the two differ, saying when freezing can start (``in_run``). The
continuous schedule (0) repeats a fixed cycle and needs no step count.
"""
from ..config import warn_user
from .groups import auto_criterion
from .sequences import INTERVAL, PROGRESSIVE, freeze_index_sequence, is_automatic

__all__ = ["counts_steps", "in_run", "run_updates", "warn_if_run_differs"]


def counts_steps(section):
    """Whether the ``grad_freeze`` config section's schedule depends on ``total_steps``: the automatic schedule with
    more than one group, or an interval or progressive schedule that freezes at all (more than one group,
    ``freeze_p`` below 1)."""
    if section["param_groups"] < 2:
        return False
    return is_automatic(section["freeze_type"]) or (section["freeze_type"] in (INTERVAL, PROGRESSIVE)
                                                    and section["freeze_p"] < 1)


def run_updates(epochs, steps_per_epoch, accumulation_steps):
    """The optimizer updates of a whole run, counted from its start (a resumed run included): ``epochs *
    steps_per_epoch`` steps, one update per ``accumulation_steps`` micro-steps (at least 1, the least
    ``total_steps``)."""
    return max(1, epochs * steps_per_epoch // accumulation_steps)


def _first_frozen(strategy):
    """The first position of ``strategy`` that freezes a group, or None."""
    return next((t for t, index in enumerate(strategy) if index > 0), None)


def _progressive(strategy, section, updates):
    """What a progressive ``strategy`` drawn for ``section["total_steps"]`` updates does in a run of ``updates``."""
    start, deepest = _first_frozen(strategy), strategy.index(max(strategy))
    stage = f"its deepest stage (training from group {max(strategy)} on)"
    what = "The progressive schedule "
    if start is None or start >= updates:
        trained = len(strategy) if start is None else start
        what += f"trains every group for its first {trained} updates, so freezing never starts in this run."
    elif deepest >= updates:
        what += f"starts freezing at update {start + 1}, but the run ends before {stage}, from update {deepest + 1}."
    elif section["total_steps"] < updates:
        what += (f"starts freezing at update {start + 1} and reaches {stage} at update {deepest + 1}, so the run's "
                 f"last {updates - deepest} updates all train that stage.")
    else:
        what += f"starts freezing at update {start + 1} and reaches {stage} at update {deepest + 1}."
    fitted = _first_frozen(freeze_index_sequence(section["param_groups"], PROGRESSIVE, section["freeze_p"], updates))
    if fitted is not None:
        what += f" Drawn for {updates} updates, it would start freezing at update {fitted + 1}."
    return what


def _interval(strategy, section, updates):
    """What an interval ``strategy`` drawn for ``section["total_steps"]`` updates does in a run of ``updates``."""
    length, start = len(strategy), _first_frozen(strategy)
    drawn = f"int({section['total_steps']} * 1.01) = {length}"
    if start is None:
        return f"Its interval sequence of {drawn} updates freezes nothing, so freezing never starts."
    what = (f"Freezing starts at update {start + 1} all the same (the interval schedule freezes about 1 - freeze_p = "
            f"{1 - section['freeze_p']:g} of the steps from the start), but ")
    if length < updates:
        return what + (f"its sequence of {drawn} updates is shorter than the run: after update {length} it starts "
                       f"again from its first entry, so the run repeats the same pattern of frozen steps "
                       f"{updates / length:.1f} times.")
    return what + f"the run uses only the first {updates} of its {drawn} entries."


def _every(interval):
    """"every update" or "every N updates"."""
    return "every update" if interval == 1 else f"every {interval} updates"


def _automatic(section, updates):
    """What the automatic schedule made for ``section["total_steps"]`` updates does in a run of ``updates``."""
    criterion = auto_criterion(section["total_steps"], section["auto_interval_share"],
                               section["auto_warmup_share"], section["auto_threshold"])
    fitted = auto_criterion(updates, section["auto_interval_share"], section["auto_warmup_share"],
                            section["auto_threshold"])
    what = (f"The automatic schedule decides {_every(criterion.interval)} and freezes nothing before update "
            f"{criterion.warmup + 1}")
    if criterion.warmup >= updates:
        what += ", so freezing never starts in this run."
    else:
        what += f", {criterion.warmup / updates:.0%} into this run rather than {section['auto_warmup_share']:.0%}."
    return what + (f" Made for {updates} updates, it would decide {_every(fitted.interval)} from update "
                   f"{fitted.warmup + 1}.")


def in_run(section, strategy, updates):
    """What the ``grad_freeze`` section's schedule does in a run of ``updates`` updates when it was made for another
    number (``total_steps``), in words: when freezing starts in this run and when it would start if made for the
    run; None when the two agree or the schedule does not depend on them (``counts_steps``). ``strategy`` is the
    sequence drawn for ``total_steps`` (the train cell's; unused, may be None, for the automatic schedule)."""
    if not counts_steps(section) or section["total_steps"] == updates:
        return None
    if is_automatic(section["freeze_type"]):
        return _automatic(section, updates)
    if section["freeze_type"] == PROGRESSIVE:
        return _progressive(tuple(strategy), section, updates)
    return _interval(tuple(strategy), section, updates)


def warn_if_run_differs(section, strategy, updates, run):
    """Warn (``warn_user``) when the ``grad_freeze`` section's schedule ``strategy`` (the train cell's, drawn for
    ``total_steps`` updates) was drawn for another number of updates than the run's ``updates``, saying when
    freezing starts in this run (``in_run``); nothing when the schedule does not depend on it (``counts_steps``).
    ``run`` describes the run for the message, e.g. "20 epochs of 44 steps"."""
    what = in_run(section, strategy, updates)
    if what is None:
        return
    warn_user(f"For 'Model.train', the freezing schedule was made for 'grad_freeze.total_steps' = "
              f"{section['total_steps']} updates, but the run has {updates} ({run}). {what} Model.train sets a "
              f"left-out 'grad_freeze.total_steps' from its first run; or set it to {updates}.")
