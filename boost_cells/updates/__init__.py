"""Update strategies: what a train cell does with a clean step's gradients.

Every strategy is an ``UpdateStrategy`` (``strategy``): ``step(loss, grads, inputs) -> (loss, applied)`` takes this
rank's unscaled, finite gradients, owns their cross-rank reduction (``grad_reducer``), applies the update and says
how many optimizer updates it applied; ``for_suffix(optimizer)`` gives the same strategy over a frozen suffix's
optimizer, sharing its state. ``ApplyGradients`` (``apply``) is the plain step, ``GradientAccumulation``
(``accumulation``) applies a mean every k micro-steps, ``AdaSumUpdate`` (``adasum``) combines the ranks' weight
deltas, ``DimReduce`` (``dim_reduce``, with its PCA matrix from ``pca``) steps in a PCA subspace.
"""
from .accumulation import GradientAccumulation, gradient_accumulation_op, gradient_clear_op
from .adasum import AdaSum, AdaSumUpdate, adasum_groups
from .apply import ApplyGradients
from .dim_reduce import DimReduce, make_dim_reduce
from .strategy import UpdateStrategy

__all__ = ["AdaSum", "AdaSumUpdate", "ApplyGradients", "DimReduce", "GradientAccumulation", "UpdateStrategy",
           "adasum_groups", "gradient_accumulation_op", "gradient_clear_op", "make_dim_reduce"]
