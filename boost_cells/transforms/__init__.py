"""Transforms: what changes the network, the optimizer, or which weights train.

Each transform takes the user's network or optimizer and returns a changed one before the train cell is built;
the network's parameter names stay as they were, so checkpoints load into the plain network. Gradient freezing
(``freeze``) also selects, step by step and inside the graph, the step over the suffix of layer groups that
trains (``FreezeSwitch``, over steps the train cells build); ``prefix_cache`` caches the outputs of a prefix frozen
for good (``FrozenPrefixCache``, over the stages ``staged_network`` finds).
"""
from .centralization import OptimizerProcess, ParameterProcess
from .fn_head import CommonHeadLastFN
from .freeze import FreezeOpt, FreezeSwitch, GradientFreeze, freeze_index_sequence, freeze_optimizer, unfrozen
from .less_bn import LessBN, apply_less_bn
from .prefix_cache import FrozenPrefixCache, Stages, split_stages, staged_network

__all__ = ["CommonHeadLastFN", "FreezeOpt", "FreezeSwitch", "FrozenPrefixCache", "GradientFreeze", "LessBN",
           "OptimizerProcess", "ParameterProcess", "Stages", "apply_less_bn", "freeze_index_sequence",
           "freeze_optimizer", "split_stages", "staged_network", "unfrozen"]
