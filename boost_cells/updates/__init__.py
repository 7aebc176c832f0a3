"""Update strategies: what a train cell does with a clean step's gradients.

Contract shared by every strategy: a Cell ``construct(loss, grads) -> loss``, given this rank's unscaled,
finite gradients; it owns their cross-rank reduction (so accumulation can reduce once per cycle and AdaSum can
replace the mean), applies the update, and returns ``loss`` made to depend on it.
"""
from .accumulation import GradientAccumulation
from .adasum import AdaSum, AdaSumUpdate, adasum_groups
from .apply import ApplyGradients

__all__ = ["AdaSum", "AdaSumUpdate", "ApplyGradients", "GradientAccumulation", "adasum_groups"]
