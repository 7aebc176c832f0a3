"""The feature-normalised head that ``LessBN(fn_flag=True)`` puts in place of a network's last Dense layer."""
import numpy as np
from mindspore import Parameter, Tensor, nn, ops
from mindspore.common import dtype as mstype
from mindspore.common.initializer import initializer

from ..mindspore_internals import keep_float32

__all__ = ["CommonHeadLastFN"]


class CommonHeadLastFN(nn.Cell):
    r"""A feature-normalised fully connected head (drop-in for ``mindspore.boost.CommonHeadLastFN``).

    ``y = multiplier * (l2norm(x) @ l2norm(weight)^T + bias)``, where ``l2norm`` divides each row by
    ``sqrt(max(sum(row^2), 1e-4))`` (``ops.L2Normalize``'s rule and epsilon, written out in elementary operations:
    on CPU the fused ``L2Normalize`` and its gradient cost a small network 2.5 ms a step more). Each logit is a cosine
    similarity between the feature and a class weight, scaled by one learned factor.

    Mixed precision: ``x`` may come in any float dtype (float16 under amp levels O2 and O3); the head computes in
    float32 at every amp level, because in float16 a feature row's ``sum(row^2)`` passes 65504 (a 2048-wide ResNet-50
    feature of values around 6 does) and every cosine becomes 0, as the reference's do. Under ``to_float(float16)``
    (amp levels O2 and O3, on the head or a network holding it) the head stays float32 (``keep_float32``) and casts
    its logits to float16; otherwise (O0, O1) they come out float32: the reference's dtypes at each level. Under O1,
    MindSpore casts the white-listed ``MatMul`` to float16, here as in the reference, so the cosines of the
    normalised (float32) rows are taken in float16.

    Args:
        in_channels (int), out_channels (int): feature and class counts.
        weight_init (Tensor, str, Initializer or number): initial weight of shape (out_channels, in_channels).
            Default: 'normal'.
        bias_init (Tensor, str, Initializer or number): initial bias of shape (out_channels,). Default: 'zeros'.
        has_bias (bool): whether to add a bias. Default: True.

    Parameters:
        weight (float32, (out_channels, in_channels)); multiplier (float32, (1,), initially 1);
        bias (float32, (out_channels,), only with ``has_bias``).

    Inputs: ``x``, Tensor of shape (N, in_channels), any float dtype.
    Outputs: Tensor of shape (N, out_channels): float32, or the dtype ``to_float`` asked for (float16, bfloat16),
    which ``output_dtype`` holds (None: no cast).
    """

    def __init__(self, in_channels, out_channels, weight_init='normal', bias_init='zeros', has_bias=True):
        super().__init__()
        self.weight = Parameter(initializer(weight_init, [out_channels, in_channels]), name='weight')
        self.multiplier = Parameter(Tensor(np.ones([1]), mstype.float32), name='multiplier')
        self.has_bias = has_bias
        if has_bias:
            self.bias = Parameter(initializer(bias_init, [out_channels]), name='bias')
            self.bias_add = ops.BiasAdd()
        self.matmul = ops.MatMul(transpose_b=True)
        self.output_dtype = None

    def add_flags_recursive(self, **flags):
        """Mixed precision (``to_float(float16)``: amp O2, O3) keeps the head float32 and sets the dtype it casts its
        logits to (``keep_float32``)."""
        return super().add_flags_recursive(**keep_float32(self, flags))

    @staticmethod
    def normalize(rows):
        """Each row divided by ``sqrt(max(sum(row^2), 1e-4))``."""
        return rows / ops.sqrt(ops.maximum((rows * rows).sum(axis=1, keepdims=True), 1e-4))

    def construct(self, x):
        if x.dtype != mstype.float32:
            x = ops.cast(x, mstype.float32)
        logits = self.matmul(self.normalize(x), self.normalize(self.weight))
        if self.has_bias:
            logits = self.bias_add(logits, self.bias)
        logits = self.multiplier * logits
        if self.output_dtype is not None:
            logits = ops.cast(logits, self.output_dtype)
        return logits
