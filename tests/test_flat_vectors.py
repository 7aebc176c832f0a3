"""``boost_cells.flat_vectors``: a tuple of tensors laid end to end as one float32 vector inside a cell, and cut back
into tensors of their shapes, against NumPy's ``concatenate`` and ``split``, in both modes."""
import numpy as np
from mindspore import Parameter, ParameterTuple, Tensor, nn, ops
from mindspore.common import dtype as mstype

from boost_cells.flat_vectors import flat_offsets, flatten, unflatten

SHAPES = [(3, 2, 2), (5,), (1, 1), (4, 3)]


class RoundTrip(nn.Cell):
    """Flattens its weights, scales the vector by ``factor`` and returns it with the tensors cut back from it."""

    def __init__(self, weights):
        super().__init__()
        self.weights = ParameterTuple(weights)
        self.offsets, self.total = flat_offsets(weights)
        self.hyper_map = ops.HyperMap()

    def construct(self, factor):
        flat = flatten(self.hyper_map, self.weights) * factor
        return flat, unflatten(self.hyper_map, flat, self.offsets, self.weights)


def test_flatten_and_unflatten_equal_numpy(mode):
    rng = np.random.default_rng(0)
    values = [rng.standard_normal(shape).astype(np.float32) for shape in SHAPES]
    weights = [Parameter(Tensor(value, mstype.float16 if i == 1 else mstype.float32), name=f"w{i}")
               for i, value in enumerate(values)]
    cell = RoundTrip(weights)
    flat, parts = cell(Tensor(2.0, mstype.float32))
    expected = np.concatenate([w.asnumpy().astype(np.float32).ravel() for w in weights]) * 2
    assert cell.offsets == (0, 12, 17, 18) and cell.total == expected.size
    np.testing.assert_array_equal(flat.asnumpy(), expected)
    for part, reference, shape in zip(parts, np.split(expected, cell.offsets[1:]), SHAPES):
        assert part.shape == shape and part.dtype == mstype.float32, mode
        np.testing.assert_array_equal(part.asnumpy(), reference.reshape(shape))
