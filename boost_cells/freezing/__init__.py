"""Gradient freezing: which weights each step trains, decided inside the compiled step.

Three subpackages, one a phase of the step:

- ``suffixes`` (built once, before the first step): the trainable parameters cut front to back into nested suffixes,
  the train groups (``groups``: ``GradientFreeze``), and one optimizer per suffix sharing the user's optimizer state
  (``suffix_optimizers``: ``FreezeOpt``; ``shared_state``).
- ``schedule`` (in the compiled step): a plan (``plan``: a ``FreezePlan``, plain Python; ``sequences``: the freezing
  types and the sequences drawn in advance) says what the schedule does over a run; a schedule (``schedules``: a
  sequence drawn in advance, or the automatic schedule that freezes settled front groups for good) follows it inside
  the graph and says from which group each step trains; ``switch`` takes that step in the graph and advances the
  schedule by the updates it applied.
- ``host`` (between steps, on the host): once groups are frozen for good, the frozen prefix's outputs can be cached
  (``prefix_cache``), so its forward pass is skipped too. What the run measures (``ledger``; the cache's own rules,
  ``cache_judge``) decides, by ``payback``'s rules, how deep it freezes and whether the cache fills: one policy
  decides both (``policy``), and each decision is a record a person reads (``decisions``).

``suffixes`` builds on the other two; ``schedule`` and ``host`` do not import each other (the import contracts in
``.importlinter``).
"""
from .suffixes.groups import GradientFreeze, freeze_optimizer, split_layers
from .schedule.plan import AutoCriterion, FreezePlan, auto_criterion, run_differs
from .host.prefix_cache import FrozenPrefixCache, PrefixSnapshot, Stages, split_stages, staged_network
from .schedule.schedules import AutoSchedule, SequenceSchedule, make_schedule
from .schedule.sequences import freeze_index_sequence
from .suffixes.suffix_optimizers import FreezeOpt, unfrozen
from .schedule.switch import FreezeSwitch, ScheduledStep

__all__ = ["AutoCriterion", "AutoSchedule", "FreezeOpt", "FreezePlan", "FreezeSwitch", "FrozenPrefixCache",
           "GradientFreeze", "PrefixSnapshot", "ScheduledStep", "SequenceSchedule", "Stages", "auto_criterion",
           "freeze_index_sequence", "freeze_optimizer", "make_schedule", "run_differs", "split_layers", "split_stages",
           "staged_network", "unfrozen"]
