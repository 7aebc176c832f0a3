"""mindspore.boost's module path ``mindspore.boost.adasum`` in boost_cells: ``from boost_cells.adasum import AdaSum``
works where ``from mindspore.boost.adasum import AdaSum`` did, and ``__all__`` lists the reference's name. The name
lives where boost_cells defines it: ``AdaSum`` in ``boost_cells.updates`` (the update strategies); this module only
re-exports it (docs/drop-in.md, "mindspore.boost's module paths").
"""
from .updates import AdaSum

__all__ = ["AdaSum"]
