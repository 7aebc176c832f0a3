"""Transforms: what changes the network or the optimizer before the train cell is built.

Each transform takes the user's network or optimizer and returns a changed one; the network's parameter names stay
as they were, so checkpoints load into the plain network. (Which weights each step trains, gradient freezing, is
``boost_cells.freezing``.)
"""
from .centralization import OptimizerProcess, ParameterProcess
from .fn_head import CommonHeadLastFN
from .less_bn import LessBN, apply_less_bn

__all__ = ["CommonHeadLastFN", "LessBN", "OptimizerProcess", "ParameterProcess", "apply_less_bn"]
