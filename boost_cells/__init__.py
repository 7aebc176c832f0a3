"""boost_cells: training-step cells for MindSpore, a drop-in for ``mindspore.boost``.

Loss-scaled training that runs on CPU, GPU and Ascend, gradient accumulation and AdaSum, configured by a
validated JSON boost config, stand-alone or data-parallel. ``python -m boost_cells explain CONFIG.json`` prints what a
config will do (``boost_cells.explain``; ``Model.train`` logs the same); the configs shipped with the package go by
name (``"O1"``, ``boost_cells.shipped``), and ``python -m boost_cells configs`` lists them. Every module path of
``mindspore.boost`` is a module of boost_cells (``boost_cells.grad_accumulation``, ``boost_cells.boost_cell_wrapper``,
...): nine small files that re-export the package's names from where its own layout defines them; ``import
boost_cells`` imports them, as ``import mindspore.boost`` imports its modules.
"""
from .auto_boost import AutoBoost
from .config import BoostConfig
from .user_warnings import BoostConfigWarning
from .diagnostics import BoostMonitor, OverflowReportCallback, locate_overflow
from .model import Model
from .run import Run
from .scaling import DynamicLossScaleUpdate, FiniteCheck, GroupLossScaleManager, Log2LossScaleUpdate, NPUFloatStatusCheck
from .updates import AdaSum, DimReduce, GradientAccumulation, gradient_accumulation_op, gradient_clear_op
from .freezing import FreezeOpt, GradientFreeze, Stages
from .transforms import CommonHeadLastFN, LessBN, OptimizerProcess, ParameterProcess
from .steps import freeze_cell
from .train_cells import BoostTrainOneStepCell, BoostTrainOneStepWithLossScaleCell, build_train_network
from .multi_optimizer import MultiOptimizerTrainOneStepCell
from . import (adasum, base, boost, boost_cell_wrapper, dim_reduce, grad_accumulation, grad_freeze,
               group_loss_scale_manager, less_batch_normalization)

__all__ = ["AdaSum", "AutoBoost", "BoostConfig", "BoostConfigWarning", "BoostMonitor", "BoostTrainOneStepCell",
           "BoostTrainOneStepWithLossScaleCell", "CommonHeadLastFN", "DimReduce", "DynamicLossScaleUpdate",
           "FiniteCheck", "FreezeOpt", "GradientAccumulation", "GradientFreeze", "GroupLossScaleManager", "LessBN",
           "Log2LossScaleUpdate", "Model", "MultiOptimizerTrainOneStepCell", "NPUFloatStatusCheck", "OptimizerProcess",
           "OverflowReportCallback", "ParameterProcess", "Run", "Stages", "build_train_network", "freeze_cell",
           "gradient_accumulation_op", "gradient_clear_op", "locate_overflow"]

__version__ = "0.1.0"
