"""mindspore.boost's module path ``mindspore.boost.grad_freeze`` in boost_cells: ``from boost_cells.grad_freeze import
GradientFreeze`` works where ``from mindspore.boost.grad_freeze import GradientFreeze`` did, and ``__all__`` lists
the reference's names, in its order. The names live where boost_cells defines them: ``FreezeOpt``, ``GradientFreeze``
in ``boost_cells.freezing`` (which weights each step trains); ``freeze_cell`` in ``boost_cells.steps`` (the step
factory); this module only re-exports them (docs/drop-in.md, "mindspore.boost's module paths").
"""
from .freezing import FreezeOpt, GradientFreeze
from .steps import freeze_cell

__all__ = ["GradientFreeze", "FreezeOpt", "freeze_cell"]
