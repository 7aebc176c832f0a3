"""mindspore.boost's module path ``mindspore.boost.boost`` in boost_cells: ``from boost_cells.boost import AutoBoost``
works where ``from mindspore.boost.boost import AutoBoost`` did, and ``__all__`` lists the reference's name. The name
lives where boost_cells defines it: ``AutoBoost`` in ``boost_cells.auto_boost`` (the compatibility entry point); this
module only re-exports it (docs/drop-in.md, "mindspore.boost's module paths").
"""
from .auto_boost import AutoBoost

__all__ = ["AutoBoost"]
