"""Transforms: what changes the network, the optimizer, or which weights train.

Each transform takes the user's network or optimizer and returns a changed one before the train cell is built;
the network's parameter names stay as they were, so checkpoints load into the plain network.
"""
from .centralization import OptimizerProcess, ParameterProcess
from .less_bn import CommonHeadLastFN, LessBN

__all__ = ["CommonHeadLastFN", "LessBN", "OptimizerProcess", "ParameterProcess"]
