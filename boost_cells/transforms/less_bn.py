"""LessBN: MindSpore's ``less_bn`` compile pass on a network, optionally with the feature-normalised head, and
the ``less_bn`` boost's training transform (network and optimizer).

``LessBN(network)`` switches on MindSpore's own ``less_bn`` graph pass (``Cell.set_boost("less_bn")``). In
GRAPH_MODE it compiles residual blocks without some of their BatchNorms: under ``LessBN(net)`` a projection
bottleneck's first two and its shortcut's; under ``LessBN(a cell holding net)`` (a network with loss) also the
first BatchNorm of every basic block, the first two of every bottleneck and the BatchNorm of projection shortcuts
(docs/less-bn.md has the measured table; ``tests/test_less_bn.py`` pins it). With ``fn_flag`` the last
``nn.Dense`` becomes a ``CommonHeadLastFN``. Unlike ``mindspore.boost.LessBN``, no parameter
is renamed: the wrapper does not prefix names, and the head's parameters carry the replaced Dense's prefix.
"""
from mindspore import nn

from ..user_warnings import warn_user
from ..mindspore_internals import refresh_sequential_cell
from ..rules import check
from .centralization import OptimizerProcess, ParameterProcess
from .fn_head import CommonHeadLastFN

__all__ = ["LessBN", "apply_less_bn", "head_applies", "replace_last_dense"]


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
    if isinstance(parent, nn.SequentialCell):  # its construct runs `cell_list`, a copy of the children
        refresh_sequential_cell(parent)
    return head


def head_applies(network, fn_flag, warned=None):
    """Whether the config's ``less_bn.fn_flag`` can apply to ``network``: True when it is on and ``network`` has an
    ``nn.Dense`` to replace. A network without one (conv only, as a video super-resolution network whose loss is
    computed inside it) trains without the head, as with the reference; then a ``BoostConfigWarning`` says so,
    attributed to the user's line, once per ``warned`` set (the caller's record of what it already warned about;
    None: always warn).
    """
    if not fn_flag or _last_dense(network) is not None:
        return fn_flag
    if warned is None or "fn_head" not in warned:
        warn_user("For 'LessBN', 'less_bn.fn_flag' is on but the network has no nn.Dense layer to replace by the "
                  "feature-normalised head (CommonHeadLastFN), so no head is applied; the rest of less_bn (the "
                  "graph pass, gradient centralization) and the level's other features still apply. Set "
                  "'less_bn.fn_flag' to false to train this network without the warning.")
        if warned is not None:
            warned.add("fn_head")
    return False


def is_less_bn(network):
    """Whether ``network`` or any of its cells already carries the ``less_bn`` flag (a ``LessBN``, or a network
    built around a backbone that went through one)."""
    return any("less_bn" in cell.get_flags() for _, cell in network.cells_and_names())


class LessBN(nn.Cell):
    """Apply MindSpore's ``less_bn`` pass to a network (drop-in for ``mindspore.boost.LessBN``).

    Sets the ``less_bn`` flag on every cell of ``network`` and ``defer_inline`` on ``network`` (so the flag
    survives inlining), as the reference does; with ``fn_flag`` the last ``nn.Dense`` becomes a
    ``CommonHeadLastFN`` (see ``replace_last_dense``). A network with any cell already flagged is left as it is,
    so applying the transform twice changes nothing (the reference checks only the top cell, so a new loss cell
    around a transformed backbone would get a second head). The reference replaces the last Dense of every cell
    that holds Dense layers; this replaces only the network's last one.

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
        check("LessBN", "fn_flag", fn_flag)
        self.network = network
        if not is_less_bn(network):
            network.set_boost("less_bn")
            if fn_flag:
                replace_last_dense(network)
            network.add_flags(defer_inline=True)

    def construct(self, *inputs):
        return self.network(*inputs)


def apply_less_bn(network, optimizer, config, warned=None):
    """The ``less_bn`` training transform of a ``BoostConfig``, as ``mindspore.boost.AutoBoost`` applies it.

    Returns ``(LessBN(network, fn_flag), new_optimizer)``: the optimizer rebuilt (same class and arguments) over
    the transformed network's trainable parameters, matched by name to the original's groups, ``comm_fusion``
    split at ``common.gradient_split_groups``, with gradient centralization if ``less_bn.gc_flag``. Without
    ``less_bn``, or for a network already under ``LessBN`` (so that ``AutoBoost`` then ``build_train_network``
    transform once), both come back unchanged. A network without an ``nn.Dense`` gets no head, with a warning
    (``head_applies``; ``warned`` as there).
    """
    if not config.enabled("less_bn") or is_less_bn(network):
        return network, optimizer
    section = config.section("less_bn")
    network = LessBN(network, fn_flag=head_applies(network, section["fn_flag"], warned))
    process = OptimizerProcess(optimizer)
    params = ParameterProcess().assign_parameter_group(network.trainable_params(),
                                                       config.section("common")["gradient_split_groups"])
    process.origin_params = ParameterProcess.generate_group_params(params, process.origin_params)
    if section["gc_flag"]:
        process.add_grad_centralization(network)
    return network, process.generate_new_optimizer()
