"""boost_cells: training-step cells for MindSpore, a drop-in for ``mindspore.boost``.

Loss-scaled training that runs on CPU, GPU and Ascend, gradient accumulation and AdaSum, configured by a
validated JSON boost config, stand-alone or data-parallel. ``python -m boost_cells explain CONFIG.json`` prints what a
config will do (``boost_cells.explain``; ``Model.train`` logs the same). Every module path of ``mindspore.boost``
(``boost_cells.grad_accumulation``, ``boost_cells.boost_cell_wrapper``, ...) is an alias of this package's names
(``boost_cells.reference_paths``).
"""
import sys

from .auto_boost import AutoBoost
from .config import BoostConfig, BoostConfigWarning
from .diagnostics import BoostMonitor, OverflowReportCallback, locate_overflow
from .model import Model
from .scaling import DynamicLossScaleUpdate, FiniteCheck, GroupLossScaleManager, Log2LossScaleUpdate, NPUFloatStatusCheck
from .updates import AdaSum, DimReduce, GradientAccumulation, gradient_accumulation_op, gradient_clear_op
from .freezing import FreezeOpt, GradientFreeze, Stages
from .transforms import CommonHeadLastFN, LessBN, OptimizerProcess, ParameterProcess
from .steps import freeze_cell
from .train_cells import BoostTrainOneStepCell, BoostTrainOneStepWithLossScaleCell, build_train_network
from .multi_optimizer import MultiOptimizerTrainOneStepCell
from .reference_paths import register as _register_reference_paths

__all__ = ["AdaSum", "AutoBoost", "BoostConfig", "BoostConfigWarning", "BoostMonitor", "BoostTrainOneStepCell",
           "BoostTrainOneStepWithLossScaleCell", "CommonHeadLastFN", "DimReduce", "DynamicLossScaleUpdate",
           "FiniteCheck", "FreezeOpt", "GradientAccumulation", "GradientFreeze", "GroupLossScaleManager", "LessBN",
           "Log2LossScaleUpdate", "Model", "MultiOptimizerTrainOneStepCell", "NPUFloatStatusCheck", "OptimizerProcess",
           "OverflowReportCallback", "ParameterProcess", "Stages", "build_train_network", "freeze_cell",
           "gradient_accumulation_op", "gradient_clear_op", "locate_overflow"]

__version__ = "0.1.0"

_register_reference_paths(sys.modules[__name__])
