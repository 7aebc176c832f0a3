"""mindspore.boost's module path ``mindspore.boost.dim_reduce`` in boost_cells: ``from boost_cells.dim_reduce import
DimReduce`` works where ``from mindspore.boost.dim_reduce import DimReduce`` did, and ``__all__`` lists the
reference's name. The name lives where boost_cells defines it: ``DimReduce`` in ``boost_cells.updates`` (the update
strategies); this module only re-exports it (docs/drop-in.md, "mindspore.boost's module paths").
"""
from .updates import DimReduce

__all__ = ["DimReduce"]
