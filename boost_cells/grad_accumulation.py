"""mindspore.boost's module path ``mindspore.boost.grad_accumulation`` in boost_cells: ``from
boost_cells.grad_accumulation import GradientAccumulation`` works where ``from mindspore.boost.grad_accumulation
import GradientAccumulation`` did, and ``__all__`` lists the reference's names, in its order. The names live where
boost_cells defines them: ``GradientAccumulation``, ``gradient_accumulation_op``, ``gradient_clear_op`` in
``boost_cells.updates`` (the update strategies); this module only re-exports them (docs/drop-in.md,
"mindspore.boost's module paths").
"""
from .updates import GradientAccumulation, gradient_accumulation_op, gradient_clear_op

__all__ = ["GradientAccumulation", "gradient_accumulation_op", "gradient_clear_op"]
