"""The run a train cell trains in, counted once (``Model.train`` counts it; a loop of your own states it) and handed
as one value to every part that depends on it: the freezing plan (its length in updates), the frozen levels' route
and its policy (the calls per epoch), and ``explain`` (what a config does in it)."""
import dataclasses

from .rules import check

__all__ = ["Run"]


@dataclasses.dataclass(frozen=True)
class Run:
    """A training run as ``Model.train`` counts it: ``epochs`` epochs of ``steps_per_epoch`` calls of the train cell
    each (one worker's calls: the batches of its shard of the dataset; ``sink_size`` in dataset sink mode on
    GPU/Ascend).

    Args:
        epochs (int or None): the run's epochs, >= 1; None where the loop does not know how long it runs: the parts
            that depend on the run's length then keep theirs (a plan made for ``grad_freeze.total_steps``).
        steps_per_epoch (int): calls of the train cell per epoch, >= 1.

    Raises:
        TypeError, ValueError: ``epochs`` is not None or an int >= 1, or ``steps_per_epoch`` is not an int >= 1.
    """

    epochs: int
    steps_per_epoch: int

    def __post_init__(self):
        if self.epochs is not None:
            check("Run", "epochs", self.epochs)
        check("Run", "steps_per_epoch", self.steps_per_epoch)

    def updates(self, accumulation_steps=1):
        """The run's optimizer updates, counted from its start (a resumed run included): one per
        ``accumulation_steps`` calls, at least 1; None when its ``epochs`` are not known."""
        if self.epochs is None:
            return None
        return max(1, self.epochs * self.steps_per_epoch // accumulation_steps)
