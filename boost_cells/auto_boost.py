"""``AutoBoost``: the reference's entry point, without its process-wide singleton.

Each ``AutoBoost(level, config_dict)`` is an independent object holding its own ``BoostConfig``. For code written
against ``mindspore.boost``, train cells built without ``boost_config=`` use the config of the most recently
constructed ``AutoBoost`` (``boost_cells.config.latest_config()``, where that one value lives); a later ``AutoBoost``
replaces it, so two configs in one process never stick to each other, and the level table is never written to.
"""
from .config import BoostConfig, set_latest_config
from .freezing import freeze_optimizer
from .transforms import LessBN, apply_less_bn
from .transforms.less_bn import head_applies, is_less_bn

__all__ = ["AutoBoost"]


class AutoBoost:
    """Resolve a boost level and config dict, as ``mindspore.boost.AutoBoost`` does.

    Args:
        level (str): "O0", "O1" or "O2". Default: "O0". Any other value raises (the reference silently uses O0).
        boost_config_dict (dict or str): a config dict in ``boost_config_dict`` format, a path to a JSON file, the
            name of a config shipped with boost_cells (``"O1"``: the shipped ``O1.json``; an existing file wins over
            a name), or "" for the level's defaults. Default: "". A config without a ``"level"`` key takes
            ``level``; one whose ``"level"`` differs from ``level`` is an error.

    Attributes:
        boost_config (dict): the six resolved feature switches (a fresh copy on each access).
        config (BoostConfig): the full validated config.

    Raises:
        ValueError, TypeError: as ``BoostConfig``.
    """

    def __init__(self, level="O0", boost_config_dict=""):
        if boost_config_dict == "" or boost_config_dict is None:
            boost_config_dict = {}
        self.config = BoostConfig.coerce(boost_config_dict, level=level, arg="boost_config_dict")
        self.level = level
        self.boost_config_dict = boost_config_dict
        self._warned = set()  # what this object's transforms already warned about (a network without a Dense)
        set_latest_config(self.config)

    @property
    def boost_config(self):
        return dict(self.config.features)

    def network_auto_process_train(self, network, optimizer):
        """Return the ``(network, optimizer)`` pair to train. With ``less_bn``: the network under ``LessBN``
        (``less_bn.fn_flag``: feature-normalised head), and a rebuilt optimizer over its parameters, split for
        gradient fusion at ``common.gradient_split_groups``, with gradient centralization if ``less_bn.gc_flag``.
        Then, with ``grad_freeze``, the optimizer becomes a ``FreezeOpt`` over the (transformed) network's groups,
        as the reference's ``freeze_generate``. Gradient accumulation, AdaSum and DimReduce live in the train cells.
        With DimReduce (which switches every other feature off) the reference swaps in ``SGD(lr=1)`` because its
        DimReduce steps through the optimizer; ours writes its update itself, so the optimizer comes back unchanged
        and only names the weights to train (its learning rate and state are not used).

        Warns:
            BoostConfigWarning: ``less_bn.fn_flag`` on and ``network`` has no ``nn.Dense``: trained without the
                feature-normalised head (as the reference does, silently); once per ``AutoBoost`` object, the eval
                transform included."""
        network, optimizer = apply_less_bn(network, optimizer, self.config, self._warned)
        return network, freeze_optimizer(self.config, network, optimizer)

    def network_auto_process_eval(self, network):
        """Return the network to evaluate: with ``less_bn``, under ``LessBN`` with the same ``fn_flag`` as in
        training, so an O1 checkpoint (with the head's ``multiplier``) loads and evaluates as trained. A network
        without an ``nn.Dense`` gets no head (warned once per ``AutoBoost`` object, see
        ``network_auto_process_train``). In GRAPH_MODE MindSpore's ``less_bn`` pass then compiles the network
        without the BatchNorms it matches, which depend on how the network is wrapped: see docs/less-bn.md
        section before evaluating a network through this that was not trained through the same transform."""
        if self.config.enabled("less_bn") and not is_less_bn(network):  # else LessBN leaves it as it is
            fn_flag = head_applies(network, self.config.section("less_bn")["fn_flag"], self._warned)
            network = LessBN(network, fn_flag=fn_flag)
        return network
