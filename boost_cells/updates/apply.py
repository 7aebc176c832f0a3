"""The plain update strategy: reduce the gradients across ranks, then one optimizer step."""
from mindspore import nn, ops

__all__ = ["ApplyGradients"]


class ApplyGradients(nn.Cell):
    """Reduce the gradients across ranks, then take one optimizer step.

    Args:
        optimizer (Cell): the optimizer. grad_reducer (Cell): a ``DistributedGradReducer``, or None (default)
            when stand-alone (no cell at all: every sub-cell costs host time on each call).

    ``construct(loss, grads)`` takes this rank's gradients; ``apply_reduced(loss, grads)`` takes gradients already
    reduced by ``grad_reducer`` (a subclass of the train cell that reduces them itself, as the reference's does).
    """

    def __init__(self, optimizer, grad_reducer=None):
        super().__init__(auto_prefix=False)
        self.optimizer = optimizer
        self.grad_reducer = grad_reducer

    def apply_reduced(self, loss, grads):
        return ops.depend(loss, self.optimizer(grads))

    def construct(self, loss, grads):
        if self.grad_reducer is not None:
            grads = self.grad_reducer(grads)
        return self.apply_reduced(loss, grads)
