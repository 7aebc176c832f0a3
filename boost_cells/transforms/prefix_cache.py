"""Cache the outputs of a network prefix that is frozen for good (Egeria), so its forward pass is skipped too.

Gradient freezing saves the backward pass of the front layers; their forward pass still runs every step. When
the front ``k`` stages are frozen for good and their inputs repeat from epoch to epoch (a fixed training set, no
augmentation), the prefix maps each sample to the same output every epoch: compute it once, then train the
suffix on the cached outputs. ``split_stages`` cuts a staged network into prefix and suffix over the same cells
(parameter names unchanged, so checkpoints still load into the plain network); ``PrefixCache`` runs the prefix
once over the inputs and serves its outputs by sample index.

The prefix runs in inference mode: BatchNorm normalises with its moving statistics, which stop changing, as
Egeria treats frozen layers. A training-mode BatchNorm's output depends on the rest of the batch, so it could not
be cached; this is the one way a cached run differs from freezing alone.
"""
import numpy as np
from mindspore import Tensor, nn

from ..rules import check, is_int

__all__ = ["PrefixCache", "Stages", "split_stages"]


class Stages(nn.Cell):
    """Cells run one after the other, like ``nn.SequentialCell``, but without renaming their parameters.

    ``nn.SequentialCell`` renames parameters by position (a slice of it turns ``2.weight`` into ``1.weight``);
    this keeps every parameter's name, so a prefix or suffix shares names, and checkpoints, with the whole.

    Args:
        cells (list of Cell): the stages, in order.

    Inputs: ``x``, the first stage's input. Outputs: the last stage's output.
    """

    def __init__(self, cells):
        super().__init__(auto_prefix=False)
        cells = list(cells)
        if not cells or not all(isinstance(cell, nn.Cell) for cell in cells):
            raise TypeError(f"For 'Stages', 'cells' must be a non-empty list of Cells, but got {cells!r}.")
        self.layers = nn.CellList(cells, auto_prefix=False)

    def __len__(self):
        return len(self.layers)

    def __iter__(self):
        return iter(self.layers)

    def construct(self, x):
        for cell in self.layers:
            x = cell(x)
        return x


def split_stages(network, index):
    """``(prefix, suffix)``: ``Stages`` over the first ``index`` stages of ``network`` and over the rest.

    Args:
        network (nn.SequentialCell or Stages): the staged network; its cells are shared, not copied.
        index (int): number of stages in the prefix, in [1, len(network) - 1].

    Raises:
        TypeError: ``network`` is not staged. ValueError: ``index`` out of range.
    """
    if not isinstance(network, (nn.SequentialCell, Stages)):
        raise TypeError(f"For 'split_stages', 'network' must be an nn.SequentialCell or Stages, but got "
                        f"{type(network).__name__}.")
    cells = list(network)
    if not is_int(index) or not 1 <= index < len(cells):
        raise ValueError(f"For 'split_stages', 'index' must be an int in [1, {len(cells) - 1}] (the network has "
                         f"{len(cells)} stages), but got {index!r}.")
    return Stages(cells[:index]), Stages(cells[index:])


class PrefixCache:
    """The outputs of a frozen prefix over a fixed input set, computed once, served by sample index.

    Args:
        prefix (Cell): the frozen front of the network; switched to inference mode (``set_train(False)``) for good.
        inputs (numpy.ndarray): every input sample the prefix will see, shape (N, ...), float32.
        batch_size (int): rows per prefix call while filling the cache. Default: 256. The last call is padded
            with zero rows to the same size, so one graph compiles (inference mode treats rows independently).

    Attributes:
        outputs (numpy.ndarray): the prefix's outputs, shape (N, ...) (for (N, C, H, W) stages: (N, C', H', W')),
            in the prefix's output dtype. Memory: N times one output's size.

    Call ``cache(indices)`` (int array of sample indices) for a Tensor of their outputs, in that order.

    Raises:
        TypeError: ``prefix`` is not a Cell or ``inputs`` not a numpy array. ValueError: ``batch_size`` < 1 or no
        inputs.
    """

    def __init__(self, prefix, inputs, batch_size=256):
        if not isinstance(prefix, nn.Cell):
            raise TypeError(f"For 'PrefixCache', 'prefix' must be a Cell, but got {type(prefix).__name__}.")
        if not isinstance(inputs, np.ndarray) or not inputs.shape or not inputs.shape[0]:
            raise TypeError(f"For 'PrefixCache', 'inputs' must be a non-empty numpy array of shape (N, ...), but got "
                            f"{type(inputs).__name__} {getattr(inputs, 'shape', '')}.")
        check("PrefixCache", "batch_size", batch_size)
        prefix.set_train(False)
        rows = min(batch_size, len(inputs))
        padded = np.concatenate([inputs, np.zeros((-len(inputs) % rows, *inputs.shape[1:]), inputs.dtype)])
        self.outputs = np.concatenate([prefix(Tensor(padded[start:start + rows])).asnumpy()
                                       for start in range(0, len(padded), rows)])[:len(inputs)]

    def __len__(self):
        return len(self.outputs)

    def __call__(self, indices):
        return Tensor(self.outputs[indices])
