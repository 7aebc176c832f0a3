"""Loss scaling: overflow detectors (is this step's gradient finite, on every rank?) and loss-scale policies
(where the scale goes next)."""
from .log2_loss_scale import Log2LossScaleUpdate
from .loss_scale import DynamicLossScaleUpdate, policy_from_config, scale_sense_and_policy
from .overflow import FiniteCheck, NPUFloatStatusCheck, make_overflow_detector

__all__ = ["DynamicLossScaleUpdate", "FiniteCheck", "Log2LossScaleUpdate", "NPUFloatStatusCheck",
           "make_overflow_detector", "policy_from_config", "scale_sense_and_policy"]
