"""The plain update strategy: reduce the gradients across ranks, then one optimizer step."""
from mindspore import ops

from ..distributed import make_grad_reducer
from .strategy import UpdateStrategy

__all__ = ["ApplyGradients"]


class ApplyGradients(UpdateStrategy):
    """Reduce the gradients across ranks, then take one optimizer step (the ``UpdateStrategy`` contract).

    Args:
        optimizer (Cell): the optimizer. info (ParallelInfo): the data-parallel setting; default None: stand-alone,
            nothing to reduce. Data-parallel, ``grad_reducer`` is MindSpore's ``DistributedGradReducer`` over the
            optimizer's weights (a suffix strategy's over its own).
    """

    def __init__(self, optimizer, info=None):
        super().__init__(optimizer.parameters,
                         None if info is None else make_grad_reducer(optimizer.parameters, info))
        self.optimizer = optimizer
        self.info = info

    def step_reduced(self, loss, grads, inputs):
        return ops.depend(loss, self.optimizer(grads)), self.one_update

    def for_suffix(self, optimizer):
        return ApplyGradients(optimizer, self.info)
