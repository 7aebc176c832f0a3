"""The freezing types and the sequences drawn in advance for the continuous, interval and progressive ones.

A sequence gives the first trained group of each update; ``SequenceSchedule`` walks it inside the graph. The
automatic type (3, "auto") has no sequence: ``AutoSchedule`` decides while training.
"""
import numpy as np

from ..rules import check

__all__ = ["AUTO", "CONTINUOUS", "INTERVAL", "PROGRESSIVE", "check_freeze_args", "freeze_index_sequence",
           "is_automatic"]

CONTINUOUS, INTERVAL, PROGRESSIVE, AUTO = 0, 1, 2, 3


def check_freeze_args(who, freeze_type, freeze_p):
    """Check ``freeze_type`` and ``freeze_p`` by their rules, naming ``who``."""
    check(who, "freeze_type", freeze_type)
    check(who, "freeze_p", freeze_p)


def is_automatic(freeze_type):
    """Whether ``freeze_type`` is the automatic schedule's (3 or "auto")."""
    return freeze_type in (AUTO, "auto")


def freeze_index_sequence(groups, freeze_type, freeze_p, total_steps, seed=0):
    """The first trained group of each step, ``int(total_steps * 1.01)`` steps long (the reference's length).

    - 0, continuous: the cycle ``[0] * z + [1, ..., groups - 1]``, ``z = int(freeze_p * (groups - 1) //
      (1 - freeze_p) + 0.5)``, repeated whole until the length is reached (the reference's rule, so a little
      longer); all zeros for ``freeze_p == 1`` (where the reference divides by zero).
    - 1, interval: starts with 0; a step is frozen while the frozen fraction so far is below ``1 - freeze_p``,
      else trains everything; a frozen step's index is drawn from ``groups-1, ..., 1`` with probabilities
      ``1, ..., groups-1`` over their sum (shallow freezing likelier), by ``np.random.RandomState(seed)``.
    - 2, progressive: 0 for the first ``round(freeze_p * total_steps)`` steps, then the index rises through
      ``1, ..., groups - 1`` in equal stages over the remaining ``total_steps`` and stays at ``groups - 1``:
      ``t -> min(groups - 1, 1 + (t - w) * (groups - 1) // (total_steps - w))`` for ``t >= w``.
    """
    check_freeze_args("GradientFreeze", freeze_type, freeze_p)
    if is_automatic(freeze_type):
        raise ValueError("For 'GradientFreeze', freeze_type 3 ('auto') has no sequence in advance: it decides while "
                         "training (boost_cells.freezing.schedules.AutoSchedule).")
    groups = int(check("GradientFreeze", "param_groups", groups))
    total_steps = int(check("GradientFreeze", "total_steps", total_steps))
    length = int(total_steps * 1.01)
    if groups == 1 or freeze_p == 1:
        return [0] * length
    if freeze_type == CONTINUOUS:
        cycle = [0] * int(freeze_p * (groups - 1) // (1 - freeze_p) + 0.5) + list(range(1, groups))
        return cycle * -(-length // len(cycle))
    if freeze_type == INTERVAL:
        rng = np.random.RandomState(seed)
        choices = list(range(groups - 1, 0, -1))
        weights = np.arange(1, groups) / sum(range(1, groups))
        sequence, trained_all, frozen = [0], 1, 0
        while len(sequence) < length:
            if frozen / (trained_all + frozen) < 1 - freeze_p:
                sequence.append(int(rng.choice(choices, p=weights)))
                frozen += 1
            else:
                sequence.append(0)
                trained_all += 1
        return sequence
    warm = int(round(freeze_p * total_steps))
    stages = max(1, total_steps - warm)
    return [0 if t < warm else min(groups - 1, 1 + (t - warm) * (groups - 1) // stages) for t in range(length)]
