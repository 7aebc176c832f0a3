"""mindspore.boost's module path ``mindspore.boost.base`` in boost_cells: ``from boost_cells.base import
OptimizerProcess`` works where ``from mindspore.boost.base import OptimizerProcess`` did, and ``__all__`` lists the
reference's names, in its order. The names live where boost_cells defines them: ``OptimizerProcess``,
``ParameterProcess`` in ``boost_cells.transforms`` (what changes the network or the optimizer); this module only
re-exports them (docs/drop-in.md, "mindspore.boost's module paths").
"""
from .transforms import OptimizerProcess, ParameterProcess

__all__ = ["OptimizerProcess", "ParameterProcess"]
