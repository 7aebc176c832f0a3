"""Gradient freezing: which weights each step trains, decided inside the compiled step.

The trainable parameters are cut front to back into nested suffixes, the train groups (``groups``:
``GradientFreeze``); each suffix has an optimizer sharing the user's optimizer state (``suffix_optimizers``:
``FreezeOpt``; ``shared_state``). A plan (``plan``: a ``FreezePlan``, plain Python) says what the schedule does over
a run; a schedule (``schedules``: a sequence drawn in advance, or the automatic schedule that freezes converged front
groups for good) follows it inside the graph and says from which group each step trains; ``switch`` takes that step
in the graph and advances the schedule by the updates it applied. Once groups are frozen for good, the frozen
prefix's outputs can be cached (``prefix_cache``), so its forward pass is skipped too. What the run measures
(``ledger``; the cache's own rules, ``cache_judge``) decides, by ``payback``'s rules, how deep it freezes and whether
the cache fills: one host-side policy decides both (``policy``), and each decision is a record a person reads
(``decisions``). ``sequences`` holds the freezing types and the rules of the sequences drawn in advance.
"""
from .groups import GradientFreeze, freeze_optimizer, split_layers
from .plan import AutoCriterion, FreezePlan, auto_criterion, run_differs
from .prefix_cache import FrozenPrefixCache, PrefixSnapshot, Stages, split_stages, staged_network
from .schedules import AutoSchedule, SequenceSchedule, make_schedule
from .sequences import freeze_index_sequence
from .suffix_optimizers import FreezeOpt, unfrozen
from .switch import FreezeSwitch, ScheduledStep

__all__ = ["AutoCriterion", "AutoSchedule", "FreezeOpt", "FreezePlan", "FreezeSwitch", "FrozenPrefixCache",
           "GradientFreeze", "PrefixSnapshot", "ScheduledStep", "SequenceSchedule", "Stages", "auto_criterion",
           "freeze_index_sequence", "freeze_optimizer", "make_schedule", "run_differs", "split_layers", "split_stages",
           "staged_network", "unfrozen"]
