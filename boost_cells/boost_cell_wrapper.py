"""mindspore.boost's module path ``mindspore.boost.boost_cell_wrapper`` in boost_cells: ``from
boost_cells.boost_cell_wrapper import BoostTrainOneStepCell`` works where ``from mindspore.boost.boost_cell_wrapper
import BoostTrainOneStepCell`` did, and ``__all__`` lists the reference's names, in its order. The names live where
boost_cells defines them: ``BoostTrainOneStepCell``, ``BoostTrainOneStepWithLossScaleCell`` in
``boost_cells.train_cells`` (the train cells); this module only re-exports them (docs/drop-in.md, "mindspore.boost's
module paths").
"""
from .train_cells import BoostTrainOneStepCell, BoostTrainOneStepWithLossScaleCell

__all__ = ["BoostTrainOneStepCell", "BoostTrainOneStepWithLossScaleCell"]
