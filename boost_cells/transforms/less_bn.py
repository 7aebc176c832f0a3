"""LessBN: MindSpore's ``less_bn`` compile pass on a network, and the feature-normalised head.

``LessBN(network)`` switches on MindSpore's own ``less_bn`` graph pass (``Cell.set_boost("less_bn")``), which
removes some BatchNorms from the compiled training graph (9 become 5 in a small ResNet here). With ``fn_flag``
the last ``nn.Dense`` of the network becomes a ``CommonHeadLastFN``: logits from L2-normalised features and
L2-normalised class weights, times a learned scale. Unlike ``mindspore.boost.LessBN``, no parameter is renamed:
the wrapper does not prefix names, and the head's parameters carry the replaced Dense's prefix.
"""
import numpy as np
from mindspore import Parameter, Tensor, nn, ops
from mindspore.common import dtype as mstype
from mindspore.common.initializer import initializer

__all__ = ["CommonHeadLastFN", "LessBN", "replace_last_dense"]


class CommonHeadLastFN(nn.Cell):
    r"""A feature-normalised fully connected head (drop-in for ``mindspore.boost.CommonHeadLastFN``).

    ``y = multiplier * (l2norm(x) @ l2norm(weight)^T + bias)``, where ``l2norm`` divides each row by
    ``sqrt(max(sum(row^2), 1e-4))`` (``ops.L2Normalize``'s epsilon). Each logit is a cosine similarity between the
    feature and a class weight, scaled by one learned factor.

    Args:
        in_channels (int), out_channels (int): feature and class counts.
        weight_init (Tensor, str, Initializer or number): initial weight of shape (out_channels, in_channels).
            Default: 'normal'.
        bias_init (Tensor, str, Initializer or number): initial bias of shape (out_channels,). Default: 'zeros'.
        has_bias (bool): whether to add a bias. Default: True.

    Parameters:
        weight (float32, (out_channels, in_channels)); multiplier (float32, (1,), initially 1);
        bias (float32, (out_channels,), only with ``has_bias``).

    Inputs: ``x``, Tensor of shape (N, in_channels). Outputs: Tensor of shape (N, out_channels).
    """

    def __init__(self, in_channels, out_channels, weight_init='normal', bias_init='zeros', has_bias=True):
        super().__init__()
        self.weight = Parameter(initializer(weight_init, [out_channels, in_channels]), name='weight')
        self.multiplier = Parameter(Tensor(np.ones([1]), mstype.float32), name='multiplier')
        self.has_bias = has_bias
        if has_bias:
            self.bias = Parameter(initializer(bias_init, [out_channels]), name='bias')
            self.bias_add = ops.BiasAdd()
        self.normalize = ops.L2Normalize(axis=1)
        self.matmul = ops.MatMul(transpose_b=True)

    def construct(self, x):
        logits = self.matmul(self.normalize(x), self.normalize(self.weight))
        if self.has_bias:
            logits = self.bias_add(logits, self.bias)
        return self.multiplier * logits


def _last_dense(network):
    """(parent cell, attribute name, Dense) of the last ``nn.Dense`` in definition order, or None."""
    found = None
    for _, cell in network.cells_and_names():
        for name, child in cell.name_cells().items():
            if isinstance(child, nn.Dense):
                found = (cell, name, child)
    return found


def replace_last_dense(network):
    """Replace the last ``nn.Dense`` of ``network`` by a ``CommonHeadLastFN`` holding its weight, in place.

    The head has no bias, as in the reference (the Dense's bias and activation are dropped: the head's logits are
    scaled cosines). Its ``weight`` is the Dense's weight Parameter (same name, same values); its ``multiplier``
    is named after the same prefix (``fc.weight`` gives ``fc.multiplier``).

    Raises:
        ValueError: ``network`` has no ``nn.Dense``.
    """
    found = _last_dense(network)
    if found is None:
        raise ValueError("For 'LessBN', 'fn_flag' needs a network with an nn.Dense layer to replace by the "
                         "feature-normalised head, but the network has none; set 'fn_flag' to False.")
    parent, name, dense = found
    head = CommonHeadLastFN(dense.in_channels, dense.out_channels, has_bias=False)
    prefix = dense.weight.name[:-len("weight")]
    head.weight = dense.weight
    head.multiplier.name = prefix + "multiplier"
    parent.insert_child_to_cell(name, head)
    return head


class LessBN(nn.Cell):
    """Apply MindSpore's ``less_bn`` pass to a network (drop-in for ``mindspore.boost.LessBN``).

    Sets the ``less_bn`` flag on every cell of ``network`` and ``defer_inline`` on ``network`` (so the flag
    survives inlining), as the reference does; with ``fn_flag`` the last ``nn.Dense`` becomes a
    ``CommonHeadLastFN`` (see ``replace_last_dense``). A network already flagged is left as it is. The reference
    replaces the last Dense of every cell that holds Dense layers; this replaces only the network's last one.

    Args:
        network (Cell): the network (with or without loss); changed in place.
        fn_flag (bool): replace the last Dense by the feature-normalised head. Default: False.

    Inputs: the network's inputs. Outputs: the network's outputs.

    Raises:
        TypeError: ``network`` is not a Cell or ``fn_flag`` is not a bool. ValueError: ``fn_flag`` and no Dense.
    """

    def __init__(self, network, fn_flag=False):
        super().__init__(auto_prefix=False)
        if not isinstance(network, nn.Cell):
            raise TypeError(f"For 'LessBN', 'network' must be a Cell, but got {type(network).__name__}.")
        if not isinstance(fn_flag, bool):
            raise TypeError(f"For 'LessBN', 'fn_flag' must be a bool, but got {type(fn_flag).__name__}.")
        self.network = network
        if "less_bn" not in network.get_flags():
            network.set_boost("less_bn")
            if fn_flag:
                replace_last_dense(network)
            network.add_flags(defer_inline=True)

    def construct(self, *inputs):
        return self.network(*inputs)
