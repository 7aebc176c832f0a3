"""Gradient centralization that runs on CPU, GPU and Ascend, and the reference's optimizer/parameter processors.

Gradient centralization (Yong et al., 2020) subtracts from a weight's gradient its mean over every axis but the
first (per output channel of a conv, per output row of a Dense), before the optimizer uses it. MindSpore's
optimizers do this through the ``Centralization`` op, which has no CPU kernel; ``OptimizerProcess`` builds the
same optimizer class with that one method replaced by ``g - mean(g)``, which runs everywhere. The rule stays the
reference's: only parameter groups flagged ``grad_centralization``, and only gradients with ndim > 1 whose
second dimension is a multiple of 16 (others pass through unchanged).
"""
from mindspore import Parameter, nn, ops
from mindspore.nn.optim import LARS

from ..mindspore_internals import make_row_tensor, optimizer_init_arguments
from .fn_head import CommonHeadLastFN

__all__ = ["OptimizerProcess", "ParameterProcess", "with_portable_centralization"]

_centralize = ops.MultitypeFuncGraph("boost_cells_centralize")


def _centralized(values, shape):
    axes = tuple(range(1, len(shape)))
    if len(shape) > 1 and shape[1] % 16 == 0:
        return values - ops.mean(values, axes, True)
    return values


@_centralize.register("Bool", "Tensor")
def _centralize_dense(apply, grad):
    if apply:
        return _centralized(grad, grad.shape)
    return grad


@_centralize.register("Bool", "RowTensor")
def _centralize_sparse(apply, grad):
    if apply:
        return make_row_tensor(grad.indices, _centralized(grad.values, grad.dense_shape), grad.dense_shape)
    return grad


class _PortableCentralization:
    """Mixin over an ``nn.Optimizer`` class: ``gradients_centralization`` without the ``Centralization`` op."""

    def gradients_centralization(self, gradients):
        if self.is_group:
            gradients = self.map_(ops.partial(_centralize), self.grad_centralization_flags, gradients)
        return gradients


def with_portable_centralization(opt_class):
    """A subclass of ``opt_class`` (an ``nn.Optimizer`` class) whose gradient centralization runs on any target;
    same name, same constructor, ``isinstance`` of ``opt_class``; ``opt_class`` itself when it already is one.

    Each call makes a new class (there is no process-wide cache of them): the class lives as long as the optimizers
    built from it, and ``type(opt)(...)`` rebuilds another optimizer of the same kind, as gradient freezing does.
    """
    if issubclass(opt_class, _PortableCentralization):
        return opt_class
    return type(opt_class.__name__, (_PortableCentralization, opt_class), {})


def _as_param_list(name, params):
    """``params`` as a non-empty list of Parameters or of group dicts."""
    params = list(params) if params is not None and not isinstance(params, list) else params
    if not params:
        raise ValueError(f"For '{name}', the optimizer's parameter list must not be empty, but got {params!r}.")
    if not isinstance(params[0], (dict, Parameter)):
        raise TypeError(f"For '{name}', the parameters must be a list of Parameter or of group dicts, but got a "
                        f"list of {type(params[0]).__name__}.")
    return params


def _wants_centralization(param, owner):
    """The reference's rule: not a BatchNorm gamma/beta nor a bias, nor in a grouped conv or the FN head."""
    if any(word in param.name for word in ("beta", "gamma", "bias")):
        return False
    return not (isinstance(owner, nn.Conv2d) and owner.group > 1) and not isinstance(owner, CommonHeadLastFN)


class OptimizerProcess:
    """Add gradient centralization to an optimizer and rebuild it (drop-in for ``mindspore.boost``'s).

    The rebuilt optimizer has the original's class (as a subclass whose centralization runs on CPU too),
    constructor arguments and learning rate, over ``origin_params`` (which ``add_grad_centralization`` or the
    caller may replace). A ``nn.LARS`` is rebuilt around a rebuilt inner optimizer.

    Args:
        opt (nn.Optimizer): the optimizer to rebuild.

    Raises:
        TypeError: ``opt`` is not an ``nn.Optimizer``.
    """

    def __init__(self, opt):
        if not isinstance(opt, nn.Optimizer):
            raise TypeError(f"For 'OptimizerProcess', 'opt' must be an nn.Optimizer, but got {type(opt).__name__}.")
        self.is_lars = isinstance(opt, LARS)
        self.single_opt = opt.opt if self.is_lars else opt
        self.opt_class = type(self.single_opt)
        self.origin_params, self.learning_rate, self.opt_init_args = optimizer_init_arguments(self.single_opt)
        self.lars_init_args = optimizer_init_arguments(opt)[2] if self.is_lars else None

    @staticmethod
    def build_params_dict(network):
        """{id(parameter): the cell that owns it} over every cell of ``network``."""
        return {id(param): cell for _, cell in network.cells_and_names()
                for param in cell.get_parameters(expand=False)}

    @staticmethod
    def build_gc_params_group(params_dict, parameters):
        """Split each group dict of ``parameters`` into a ``grad_centralization`` group (weights) and one without
        (biases, BatchNorm gamma/beta, grouped convs, the FN head); an ``order_params`` group stays as it is."""
        groups = []
        for group in parameters:
            if "order_params" in group:
                groups.append(group)
                continue
            centralized = [p for p in group["params"] if _wants_centralization(p, params_dict.get(id(p)))]
            plain = [p for p in group["params"] if not _wants_centralization(p, params_dict.get(id(p)))]
            if centralized:
                groups.append({**group, "params": centralized, "grad_centralization": True})
            if plain:
                groups.append({**group, "params": plain})
        return groups

    def add_grad_centralization(self, network):
        """Flag the weights of ``network`` (conv, Dense; not biases, BatchNorm gamma/beta, grouped convs or the FN
        head) for gradient centralization. A plain list of Parameters is first made one group (the reference only
        logs a warning and leaves centralization off).

        Raises:
            ValueError: empty parameter list. TypeError: parameters neither Parameters nor group dicts.
        """
        parameters = _as_param_list("OptimizerProcess", self.origin_params)
        if isinstance(parameters[0], Parameter):
            parameters = [{"params": parameters}]
        self.origin_params = self.build_gc_params_group(self.build_params_dict(network), parameters)

    def generate_new_optimizer(self):
        """A new optimizer over ``origin_params``, of the original class with portable centralization."""
        opt = with_portable_centralization(self.opt_class)(params=self.origin_params, learning_rate=self.learning_rate,
                                                          **self.opt_init_args)
        return LARS(opt, **self.lars_init_args) if self.is_lars else opt


class ParameterProcess:
    """Group parameters and set gradient-fusion split points (drop-in for ``mindspore.boost``'s).

    Attributes:
        _parameter_indices (int): the next ``comm_fusion`` index; starts at 1 and grows across calls.
    """

    def __init__(self):
        self._parameter_indices = 1

    @staticmethod
    def generate_group_params(parameters, origin_params):
        """The optimizer groups of ``origin_params`` over the new ``parameters``, matched by name.

        A plain Parameter list gives one group of ``parameters``. Otherwise each group keeps its options and holds
        the new parameters whose names it held (an ``order_params`` group gets all of ``parameters``); parameters
        no group named join one more group with the options of the group with the most keys.

        Raises:
            ValueError: empty ``origin_params``. TypeError: neither Parameters nor group dicts.
        """
        origin = _as_param_list("ParameterProcess", origin_params)
        if isinstance(origin[0], Parameter):
            return [{"params": parameters}]
        by_name = {param.name: param for param in parameters}
        unclaimed = dict(by_name)
        groups = []
        for group in origin:
            if "order_params" in group:
                groups.append({**group, "order_params": parameters})
                continue
            members = [by_name[p.name] for p in group["params"] if p.name in by_name]
            for param in members:
                unclaimed.pop(param.name, None)
            groups.append({**group, "params": members})
        if unclaimed:
            richest = max((g for g in origin if "order_params" not in g), key=len, default={})
            groups.append({**richest, "params": list(unclaimed.values())})
        return groups

    def assign_parameter_group(self, parameters, split_point=None):
        """Set ``comm_fusion`` on ``parameters`` (list or tuple): a new fusion index starts at each index in
        ``split_point`` (default: the middle). Anything else, or an empty list, is returned unchanged."""
        if not isinstance(parameters, (list, tuple)) or not parameters:
            return parameters
        splits = split_point if split_point else [len(parameters) // 2]
        for index, param in enumerate(parameters):
            if index in splits:
                self._parameter_indices += 1
            param.comm_fusion = self._parameter_indices
        return parameters
