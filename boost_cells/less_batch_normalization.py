"""mindspore.boost's module path ``mindspore.boost.less_batch_normalization`` in boost_cells: ``from
boost_cells.less_batch_normalization import CommonHeadLastFN`` works where ``from
mindspore.boost.less_batch_normalization import CommonHeadLastFN`` did, and ``__all__`` lists the reference's names,
in its order. The names live where boost_cells defines them: ``CommonHeadLastFN``, ``LessBN`` in
``boost_cells.transforms`` (what changes the network or the optimizer); this module only re-exports them
(docs/drop-in.md, "mindspore.boost's module paths").
"""
from .transforms import CommonHeadLastFN, LessBN

__all__ = ["CommonHeadLastFN", "LessBN"]
