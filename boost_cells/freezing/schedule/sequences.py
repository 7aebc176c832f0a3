"""The freezing types and the sequences drawn in advance for the continuous, interval and progressive ones.

A sequence gives the first trained group of each update; ``SequenceSchedule`` walks it inside the graph. The
automatic type (3, "auto") has no sequence: ``AutoSchedule`` decides while training.
"""
import itertools

import numpy as np

from ...rules import check

__all__ = ["AUTO", "CONTINUOUS", "INTERVAL", "PROGRESSIVE", "check_freeze_args", "continuous_cycle",
           "freeze_index_sequence", "interval_indices", "is_automatic", "progressive_index", "sequence_length"]

CONTINUOUS, INTERVAL, PROGRESSIVE, AUTO = 0, 1, 2, 3


def check_freeze_args(who, freeze_type, freeze_p):
    """Check ``freeze_type`` and ``freeze_p`` by their rules, naming ``who``."""
    check(who, "freeze_type", freeze_type)
    check(who, "freeze_p", freeze_p)


def is_automatic(freeze_type):
    """Whether ``freeze_type`` is the automatic schedule's (3 or "auto")."""
    return freeze_type in (AUTO, "auto")


def sequence_length(total_steps):
    """The length of a sequence drawn for ``total_steps`` updates: ``int(total_steps * 1.01)`` (the reference's)."""
    return int(total_steps * 1.01)


def continuous_cycle(groups, freeze_p):
    """The continuous schedule's cycle: ``[0] * z + [1, ..., groups - 1]``, ``z = int(freeze_p * (groups - 1) //
    (1 - freeze_p) + 0.5)`` (the reference's rule); ``[0]`` for one group or ``freeze_p == 1`` (where the reference
    divides by zero)."""
    if groups == 1 or freeze_p == 1:
        return [0]
    return [0] * int(freeze_p * (groups - 1) // (1 - freeze_p) + 0.5) + list(range(1, groups))


def interval_indices(groups, freeze_p, seed=0):
    """The interval schedule's first trained groups, one per update, without end: 0 first; then an update is frozen
    while the frozen fraction so far is below ``1 - freeze_p``, else trains everything; a frozen update's index is
    drawn from ``groups-1, ..., 1`` with probabilities ``1, ..., groups-1`` over their sum (shallow freezing
    likelier), by ``np.random.RandomState(seed)``. All zeros for one group or ``freeze_p == 1``."""
    if groups == 1 or freeze_p == 1:
        yield from itertools.repeat(0)  # never returns
    rng = np.random.RandomState(seed)
    choices = list(range(groups - 1, 0, -1))
    weights = np.arange(1, groups) / sum(range(1, groups))
    yield 0
    trained_all, frozen = 1, 0
    while True:
        if frozen / (trained_all + frozen) < 1 - freeze_p:
            yield int(rng.choice(choices, p=weights))
            frozen += 1
        else:
            yield 0
            trained_all += 1


def progressive_index(step, groups, freeze_p, total_steps):
    """The progressive schedule's first trained group at ``step`` (from 0): 0 for the first ``w = round(freeze_p *
    total_steps)`` steps, then rising through ``1, ..., groups - 1`` in equal stages over the remaining
    ``total_steps`` and staying at ``groups - 1``: ``min(groups - 1, 1 + (step - w) * (groups - 1) // (total_steps
    - w))``; always 0 for one group or ``freeze_p == 1``. It never falls, so a group it freezes stays frozen."""
    warm = int(round(freeze_p * total_steps))
    if groups == 1 or freeze_p == 1 or step < warm:
        return 0
    return min(groups - 1, 1 + (step - warm) * (groups - 1) // max(1, total_steps - warm))


def freeze_index_sequence(groups, freeze_type, freeze_p, total_steps, seed=0):
    """The first trained group of each step, ``sequence_length(total_steps)`` steps long.

    - 0, continuous: ``continuous_cycle`` repeated whole until the length is reached (the reference's rule, so a
      little longer).
    - 1, interval: the first entries of ``interval_indices`` (seeded by ``seed``).
    - 2, progressive: ``progressive_index`` of each step.
    """
    check_freeze_args("GradientFreeze", freeze_type, freeze_p)
    if is_automatic(freeze_type):
        raise ValueError("For 'GradientFreeze', freeze_type 3 ('auto') has no sequence in advance: it decides while "
                         "training (boost_cells.freezing.schedule.schedules.AutoSchedule).")
    groups = int(check("GradientFreeze", "param_groups", groups))
    total_steps = int(check("GradientFreeze", "total_steps", total_steps))
    length = sequence_length(total_steps)
    if freeze_type == CONTINUOUS:
        cycle = continuous_cycle(groups, freeze_p)
        return cycle * -(-length // len(cycle))
    if freeze_type == INTERVAL:
        return list(itertools.islice(interval_indices(groups, freeze_p, seed), length))
    return [progressive_index(t, groups, freeze_p, total_steps) for t in range(length)]
