"""The update-strategy contract: what a train step does with one clean step's gradients."""
from mindspore import Tensor, nn, ops
from mindspore.common import dtype as mstype

__all__ = ["UpdateStrategy"]


class UpdateStrategy(nn.Cell):
    """Base of every update strategy (``ApplyGradients``, ``GradientAccumulation``, ``AdaSumUpdate``, ``DimReduce``).

    A train step hands a strategy one clean step's gradients: this rank's, unscaled and finite. The strategy owns
    their reduction across ranks (accumulation reduces once per cycle, AdaSum replaces the mean), applies the update
    and says how many optimizer updates it applied, as optax's ``MultiSteps`` says ``gradient_step``: the freezing
    schedule advances by that count, so an accumulating micro-step does not move it.

    - ``step(loss, grads, inputs) -> (loss, applied)``: ``grads``, a tuple in ``weights``' order; ``inputs``, the
      step's inputs as a tuple (DimReduce's line search runs the network on them; the others ignore them).
      ``loss`` comes back made to depend on the update; ``applied`` is an int32 scalar, the optimizer updates applied
      (1, or 0 on an accumulating micro-step). Here: ``grad_reducer`` (if any), then ``step_reduced``.
    - ``step_reduced(loss, grads, inputs) -> (loss, applied)``: the same for gradients a caller already reduced with
      ``grad_reducer`` (a train-cell subclass that reduces them itself, as the reference's ``construct`` does). Every
      strategy implements it.
    - ``grad_reducer`` (Cell or None): the cross-rank reduction ``step`` applies, None stand-alone;
      ``set_grad_reducer(reducer)`` replaces it (a train cell does when a subclass assigns its own).
    - ``for_suffix(optimizer)``: the same strategy over a suffix optimizer of gradient freezing (an optimizer over
      some of this one's weights, sharing its optimizer state), using this strategy's own state (buffers, counters);
      a strategy that cannot train a suffix alone raises ValueError saying so, when the train cell is built.
    - ``adasum_part()``: the ``AdaSumUpdate`` that combines the ranks' updates in this strategy (itself, or the one
      an accumulation applies its mean through), or None: what a train cell's ``adasum_process`` runs.
    - ``construct(loss, grads) -> loss``: ``step`` without inputs, for code that calls a strategy as the reference
      calls its accumulation (``accumulate(loss, grads)``).

    Args:
        weights (ParameterTuple): the weights the gradients are of, in order.
        grad_reducer (Cell): the cross-rank reduction; default None (stand-alone: no cell at all, since every
            sub-cell costs host time on each call).
    """

    def __init__(self, weights, grad_reducer=None):
        super().__init__(auto_prefix=False)
        self.weights = weights
        self.grad_reducer = grad_reducer
        self.one_update = Tensor(1, mstype.int32)
        self.no_update = Tensor(0, mstype.int32)

    def set_grad_reducer(self, grad_reducer):
        """Reduce across ranks with ``grad_reducer`` (a Cell, or None for no reduction) from the next compile on."""
        self.grad_reducer = grad_reducer

    def step(self, loss, grads, inputs):
        if self.grad_reducer is not None:
            grads = self.grad_reducer(grads)
        return self.step_reduced(loss, grads, inputs)

    def step_reduced(self, loss, grads, inputs):
        raise NotImplementedError

    def for_suffix(self, optimizer):
        raise NotImplementedError

    def adasum_part(self):
        return None

    def construct(self, loss, grads):
        return self.step(loss, grads, ())[0]
