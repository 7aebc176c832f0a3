"""Update strategies: what a train cell does with a clean step's gradients.

Contract shared by every strategy: a Cell ``construct(loss, grads) -> loss``, given this rank's unscaled,
finite gradients; it owns their cross-rank reduction (so accumulation can reduce once per cycle and AdaSum can
replace the mean), applies the update, and returns ``loss`` made to depend on it. Its ``grad_reducer`` is that
reduction (None stand-alone). The plain, accumulation and AdaSum strategies also have ``apply_reduced(loss,
grads)``, for gradients a caller already reduced with ``grad_reducer`` (a train-cell subclass written like the
reference's ``construct``). A strategy that must re-run the
network (DimReduce's line search) sets the class attribute ``takes_inputs = True``; the train cells then call it
as ``construct(loss, grads, *inputs)`` with the step's inputs, and the others keep the two-argument form.
"""
from .accumulation import GradientAccumulation, gradient_accumulation_op, gradient_clear_op
from .adasum import AdaSum, AdaSumUpdate, adasum_groups
from .apply import ApplyGradients
from .dim_reduce import DimReduce, make_dim_reduce

__all__ = ["AdaSum", "AdaSumUpdate", "ApplyGradients", "DimReduce", "GradientAccumulation", "adasum_groups",
           "gradient_accumulation_op", "gradient_clear_op", "make_dim_reduce"]
