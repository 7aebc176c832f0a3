"""Loss scaling: overflow detectors (is this step's gradient finite, on every rank?) and loss-scale policies
(where the scale goes next)."""
from .group_loss_scale import GroupLossScale, GroupLossScaleManager
from .log2_loss_scale import Log2LossScaleUpdate
from .loss_scale import DynamicLossScaleUpdate, HeldLossScale, LossScale, policy_from_config, scale_sense_and_policy
from .overflow import FiniteCheck, NPUFloatStatusCheck, make_overflow_detector

__all__ = ["DynamicLossScaleUpdate", "FiniteCheck", "GroupLossScale", "GroupLossScaleManager", "HeldLossScale",
           "Log2LossScaleUpdate", "LossScale", "NPUFloatStatusCheck", "make_overflow_detector", "policy_from_config",
           "scale_sense_and_policy"]
