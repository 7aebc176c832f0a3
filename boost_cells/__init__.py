"""boost_cells: training-step cells for MindSpore, a drop-in for ``mindspore.boost``.

Loss-scaled training that runs on CPU, GPU and Ascend, gradient accumulation and AdaSum, configured by a
validated JSON boost config, stand-alone or data-parallel.
"""
from .auto_boost import AutoBoost
from .config import BoostConfig, BoostConfigWarning
from .diagnostics import BoostMonitor, OverflowReportCallback, locate_overflow
from .scaling import DynamicLossScaleUpdate, FiniteCheck, Log2LossScaleUpdate, NPUFloatStatusCheck
from .updates import AdaSum, GradientAccumulation
from .transforms import CommonHeadLastFN, LessBN, OptimizerProcess, ParameterProcess
from .train_cells import BoostTrainOneStepCell, BoostTrainOneStepWithLossScaleCell, build_train_network
from .multi_optimizer import MultiOptimizerTrainOneStepCell

__all__ = ["AdaSum", "AutoBoost", "BoostConfig", "BoostConfigWarning", "BoostMonitor", "BoostTrainOneStepCell",
           "BoostTrainOneStepWithLossScaleCell", "CommonHeadLastFN", "DynamicLossScaleUpdate", "FiniteCheck",
           "GradientAccumulation", "LessBN", "Log2LossScaleUpdate", "MultiOptimizerTrainOneStepCell",
           "NPUFloatStatusCheck", "OptimizerProcess", "OverflowReportCallback", "ParameterProcess",
           "build_train_network", "locate_overflow"]

__version__ = "0.1.0"
