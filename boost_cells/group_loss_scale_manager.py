"""mindspore.boost's module path ``mindspore.boost.group_loss_scale_manager`` in boost_cells: ``from
boost_cells.group_loss_scale_manager import GroupLossScaleManager`` works where ``from
mindspore.boost.group_loss_scale_manager import GroupLossScaleManager`` did, and ``__all__`` lists the reference's
name. The name lives where boost_cells defines it: ``GroupLossScaleManager`` in ``boost_cells.scaling`` (the loss
scales and overflow checks); this module only re-exports it (docs/drop-in.md, "mindspore.boost's module paths").
"""
from .scaling import GroupLossScaleManager

__all__ = ["GroupLossScaleManager"]
