"""``AutoBoost``: the reference's entry point, without its process-wide singleton.

Each ``AutoBoost(level, config_dict)`` is an object of its own holding its ``BoostConfig``, and puts that config in
force in the process (``boost_cells.config_in_force``): train cells built without ``boost_config=`` use it. A later
``AutoBoost(level, config_dict)`` replaces it, with a warning naming both when they differ, and the level table is
never written to. ``AutoBoost()`` with no arguments reads the config in force back, as the reference's train cell and
code written for it do (``self.auto_boost = AutoBoost()``).
"""
from .config import BoostConfig
from .config_in_force import latest_config, set_latest_config
from .freezing import freeze_optimizer
from .transforms import LessBN, apply_less_bn
from .transforms.less_bn import head_applies, is_less_bn

__all__ = ["AutoBoost"]


class _LeftOut(str):
    """The reference's default of an ``AutoBoost`` argument, marked as left out by the caller: equal to the default
    (the signature reads as the reference's), and told apart from the same value given (``AutoBoost("O0")`` puts
    level O0 in force, ``AutoBoost()`` reads the config in force)."""


_LEVEL_LEFT_OUT = _LeftOut("O0")
_CONFIG_LEFT_OUT = _LeftOut("")


def _resolve(level, boost_config_dict):
    """The BoostConfig of ``AutoBoost(level, boost_config_dict)``: "" or None stand for the level's defaults."""
    given = {} if boost_config_dict == "" or boost_config_dict is None else boost_config_dict
    return BoostConfig.coerce(given, level=level, arg="boost_config_dict")


def _read_only(section, key):
    """A read-only property: the value of ``section.key`` in the config (``AutoBoost``'s attribute of the same name
    in the reference, which its setters write from the config dict)."""
    return property(lambda self: self.config.section(section)[key],
                    doc=f"The config's '{section}.{key}' (read-only: build another AutoBoost to change it).")


class AutoBoost:
    """Resolve a boost level and config dict, as ``mindspore.boost.AutoBoost`` does.

    Args:
        level (str): "O0", "O1" or "O2". Default: "O0". Any other value raises (the reference silently uses O0).
            With both arguments left out, ``AutoBoost()`` reads the config in force back and changes nothing.
        boost_config_dict (dict or str): a config dict in ``boost_config_dict`` format, a path to a JSON file, the
            name of a config shipped with boost_cells (``"O1"``: the shipped ``O1.json``; an existing file wins over
            a name), or "" for the level's defaults. Default: "". A config without a ``"level"`` key takes
            ``level``; one whose ``"level"`` differs from ``level`` is an error.

    Attributes:
        config (BoostConfig): the full validated config.
        level (str): the config's level. boost_config_dict: the config as given (with no arguments: the config in
            force, as a dict ``BoostConfig.from_dict`` takes).
        boost_config (dict): the six resolved feature switches (a fresh copy on each access).
    The reference's settings, read-only, each the config's key of the same name (``grad_freeze``'s keys are in
    ``config.section("grad_freeze")``): ``device_number``, ``grad_accumulation_step``, ``gradient_groups``
    (``common.gradient_split_groups``), ``rho``, ``gamma``, ``alpha``, ``sigma``, ``n_components``, ``pca_mat_path``,
    ``weight_load_dir``, ``timeout`` (s); ``local_pca_mat_path``, None without ``dim_reduce`` (see the property).

    Raises:
        ValueError, TypeError: as ``BoostConfig``.

    Warns:
        BoostConfigWarning: the config replaces a different config in force (``boost_cells.config_in_force``).
    """

    device_number = _read_only("common", "device_number")
    grad_accumulation_step = _read_only("common", "grad_accumulation_step")
    gradient_groups = _read_only("common", "gradient_split_groups")
    rho = _read_only("dim_reduce", "rho")
    gamma = _read_only("dim_reduce", "gamma")
    alpha = _read_only("dim_reduce", "alpha")
    sigma = _read_only("dim_reduce", "sigma")
    n_components = _read_only("dim_reduce", "n_components")
    pca_mat_path = _read_only("dim_reduce", "pca_mat_path")
    weight_load_dir = _read_only("dim_reduce", "weight_load_dir")
    timeout = _read_only("dim_reduce", "timeout")

    def __init__(self, level=_LEVEL_LEFT_OUT, boost_config_dict=_CONFIG_LEFT_OUT):
        if level is _LEVEL_LEFT_OUT and boost_config_dict is _CONFIG_LEFT_OUT:
            config = latest_config()
            self._hold(config, config.to_dict())
        else:
            self._hold(set_latest_config(_resolve(level, boost_config_dict)), boost_config_dict)

    @classmethod
    def holding(cls, config, level=None):
        """An ``AutoBoost`` over ``config`` (anything ``boost_config_dict`` takes, or a BoostConfig; ``level`` as
        ``AutoBoost``'s) that leaves the config in force alone: a train cell's ``auto_boost``, which holds the cell's
        own config, and a ``Model``'s, whose config is its own."""
        boost = cls.__new__(cls)
        boost._hold(_resolve(level, config), config.to_dict() if isinstance(config, BoostConfig) else config)
        return boost

    def _hold(self, config, boost_config_dict):
        self.config = config
        self.level = config.level_name
        self.boost_config_dict = boost_config_dict
        self._warned = set()  # what this object's transforms already warned about (a network without a Dense)

    @property
    def boost_config(self):
        return dict(self.config.features)

    @property
    def local_pca_mat_path(self):
        """The reference's path of this rank's PCA file, which its ``network_auto_process_train`` writes with
        ``dim_reduce`` on; None without ``dim_reduce``, as the reference's.

        Raises:
            ValueError: with ``dim_reduce`` on: boost_cells writes no such file (the message names what to read).
        """
        if not self.config.enabled("dim_reduce"):
            return None
        raise ValueError("For 'AutoBoost', 'local_pca_mat_path' has no value here: boost_cells writes no per-rank "
                         "PCA file. The train cell computes the PCA matrix itself, from 'dim_reduce.pca_mat_path' "
                         "(an .npy) or the checkpoints in 'dim_reduce.weight_load_dir': read those "
                         "(auto_boost.pca_mat_path, auto_boost.weight_load_dir), or the cell's dim_reduce.pca.")

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
