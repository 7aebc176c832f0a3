"""Gradient freezing: on each step only a suffix of the network's parameter groups trains.

The parameters are split front to back into ``param_groups`` nested suffixes (group ``k`` = the layers from the
``k``-th boundary to the end); a schedule (the *train strategy*) says, step by step, from which group training
starts. A step that trains from group ``k`` computes no gradient for the groups before it: in GRAPH_MODE it is a
graph of its own whose ``GradOperation`` covers the suffix's weights only, so the backward pass stops at the
first trained layer, and the host picks the graph before each step (``FreezeSchedule``), not a tensor switch.

Every suffix optimizer shares the state of the user's optimizer (moments, ``global_step``, learning rate), so a
frozen parameter and its state stay bit-identical while frozen, and learning-rate schedules count every real
update. The schedule position advances by the updates a step really applied (the optimizer's ``global_step``
increments): an overflowing step or an accumulating micro-step keeps the position, so every micro-step of an
accumulation cycle trains the same suffix.
"""
import numpy as np
from mindspore import Parameter, Tensor, nn
from mindspore.common import dtype as mstype
from mindspore.nn.optim import LARS, Optimizer

from .shared_state import positional_map, share_parameters

__all__ = ["GradientFreeze", "FreezeOpt", "FreezeSchedule", "freeze_cell", "freeze_optimizer",
           "freeze_index_sequence", "split_layers", "unfrozen", "CONTINUOUS", "INTERVAL", "PROGRESSIVE"]

CONTINUOUS, INTERVAL, PROGRESSIVE = 0, 1, 2
FREEZE_TYPES = (CONTINUOUS, INTERVAL, PROGRESSIVE)


def _check_int(who, name, value, low, high=None):
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < low \
            or (high is not None and value > high):
        bound = "" if high is None else f" and <= {high}"
        raise ValueError(f"For '{who}', '{name}' must be an int >= {low}{bound}, but got {value!r}.")
    return int(value)


def _check_freeze_args(who, freeze_type, freeze_p):
    if isinstance(freeze_type, bool) or freeze_type not in FREEZE_TYPES:
        raise ValueError(f"For '{who}', 'freeze_type' must be one of 0 (continuous), 1 (interval) or 2 "
                         f"(progressive), but got {freeze_type!r}.")
    if isinstance(freeze_p, bool) or not isinstance(freeze_p, (int, float)) or not 0 <= freeze_p <= 1:
        raise ValueError(f"For '{who}', 'freeze_p' must be a number in [0, 1], but got {freeze_p!r}.")


def split_layers(parameters):
    """The reference's layers: consecutive parameters, a new layer starting at a parameter whose name has neither
    'bn' nor 'bias' once the current layer holds 3 or more, so a conv's BatchNorm and bias stay with it."""
    layers, current = [], []
    for parameter in parameters:
        if "bn" in parameter.name or "bias" in parameter.name or len(current) < 3:
            current.append(parameter)
        else:
            layers.append(current)
            current = [parameter]
    if current:
        layers.append(current)
    return layers


def freeze_index_sequence(groups, freeze_type, freeze_p, total_steps, seed=0):
    """The first trained group of each step, ``int(total_steps * 1.01)`` steps long (the reference's length).

    - 0, continuous: the cycle ``[0] * z + [1, ..., groups - 1]``, ``z = int(freeze_p * (groups - 1) //
      (1 - freeze_p) + 0.5)``, repeated whole until the length is reached (the reference's rule, so a little
      longer); all zeros for ``freeze_p == 1`` (where the reference divides by zero).
    - 1, interval: starts with 0; a step is frozen while the frozen fraction so far is below ``1 - freeze_p``,
      else trains everything; a frozen step's index is drawn from ``groups-1, ..., 1`` with probabilities
      ``1, ..., groups-1`` over their sum (shallow freezing likelier), by ``np.random.RandomState(seed)``.
    - 2, progressive: 0 for the first ``round(freeze_p * total_steps)`` steps, then the index rises through
      ``1, ..., groups - 1`` in equal stages over the remaining ``total_steps`` and stays at ``groups - 1``:
      ``t -> min(groups - 1, 1 + (t - w) * (groups - 1) // (total_steps - w))`` for ``t >= w``.
    """
    _check_freeze_args("GradientFreeze", freeze_type, freeze_p)
    groups = _check_int("GradientFreeze", "param_groups", groups, 1)
    total_steps = _check_int("GradientFreeze", "total_steps", total_steps, 1)
    length = int(total_steps * 1.01)
    if groups == 1 or freeze_p == 1:
        return [0] * length
    if freeze_type == CONTINUOUS:
        cycle = [0] * int(freeze_p * (groups - 1) // (1 - freeze_p) + 0.5) + list(range(1, groups))
        return cycle * -(-length // len(cycle))
    if freeze_type == INTERVAL:
        rng = np.random.RandomState(seed)
        choices = list(range(groups - 1, 0, -1))
        weights = np.arange(1, groups) / sum(range(1, groups))
        sequence, trained_all, frozen = [0], 1, 0
        while len(sequence) < length:
            if frozen / (trained_all + frozen) < 1 - freeze_p:
                sequence.append(int(rng.choice(choices, p=weights)))
                frozen += 1
            else:
                sequence.append(0)
                trained_all += 1
        return sequence
    warm = int(round(freeze_p * total_steps))
    stages = max(1, total_steps - warm)
    return [0 if t < warm else min(groups - 1, 1 + (t - warm) * (groups - 1) // stages) for t in range(length)]


def _group_parameters(who, group):
    """The Parameters of one train group given as Parameters or as optimizer group dicts."""
    if not isinstance(group, (list, tuple)):
        raise TypeError(f"For '{who}', each element of 'train_parameter_groups' must be a list or tuple of Parameters "
                        f"or of group dicts, but got {type(group).__name__}.")
    if all(isinstance(item, Parameter) for item in group):
        return list(group)
    if all(isinstance(item, dict) and "params" in item for item in group):
        return [p for item in group for p in item["params"]]
    raise TypeError(f"For '{who}', each element of 'train_parameter_groups' must hold only Parameters or only "
                    "optimizer group dicts with a 'params' key.")


def _suffix_optimizer(base, parameters):
    """An optimizer of ``base``'s class and arguments over ``parameters`` that uses ``base``'s state (LARS: around
    such an optimizer of its inner one)."""
    wanted = {id(p) for p in parameters}
    if len(wanted) == len(base.parameters):
        return base
    if isinstance(base, LARS):
        suffix = LARS(_suffix_optimizer(base.opt, parameters), **base.init_args)
        return share_parameters(suffix, base, positional_map(suffix, base), who="FreezeOpt")
    params = base.init_params["params"]
    if isinstance(params[0], dict):
        if any("order_params" in group for group in params):
            raise ValueError("For 'FreezeOpt', optimizer groups with 'order_params' cannot be split by layer group.")
        params = [{**group, "params": [p for p in group["params"] if id(p) in wanted]} for group in params]
        kept = [group for group in params if group["params"]]
        if base.dynamic_lr and base.is_group_lr and len(kept) != len(params):
            raise ValueError("For 'FreezeOpt', an optimizer with a dynamic learning rate per group cannot drop a "
                             "whole group when freezing; give every group a parameter in each trained suffix.")
        params = kept
    else:
        params = [p for p in params if id(p) in wanted]
    args = dict(base.init_args)
    args.update(args.pop("kwargs", {}))
    learning_rate = base.init_learning_rate if base.init_learning_rate is not None else base.learning_rate
    suffix = type(base)(params, learning_rate=learning_rate, **args)
    return share_parameters(suffix, base, positional_map(suffix, base), who="FreezeOpt")


class FreezeOpt(nn.Cell):
    """The optimizer of gradient freezing: one optimizer per train group, all sharing ``opt``'s state.

    Drop-in for ``mindspore.boost.FreezeOpt``. ``opts[k]`` updates the parameters of ``train_parameter_groups[k]``
    (a suffix of the network, as ``GradientFreeze.split_parameters_groups`` makes them); unlike the reference's
    copies, the suffix optimizers keep no state of their own: moments, ``global_step`` and learning rate are
    ``opt``'s, so checkpoints hold one set of optimizer state under the usual names and learning-rate schedules
    (list or ``LearningRateSchedule``) see every real update. A train cell given a ``FreezeOpt`` trains with it.

    Args:
        opt (Optimizer): the optimizer (LARS included). train_parameter_groups (list): per group, a list of
            Parameters or of ``opt``-style group dicts; default one group of every parameter.
        train_strategy (list, tuple or 1-D int32 Tensor): the first trained group of each step; default
            ``0, 1, ..., groups - 1``. cyclic (bool): after the strategy's last step start again at its first
            (the reference), or (False) stay at its last entry.

    Raises:
        TypeError: ``opt`` is not an Optimizer, or a group is not a list. ValueError: a strategy without
        groups, an index outside ``[0, groups)``, or a group parameter that ``opt`` does not update.
    """

    def __init__(self, opt, train_parameter_groups=None, train_strategy=None, *, cyclic=True):
        super().__init__(auto_prefix=False)
        if not isinstance(opt, Optimizer):
            raise TypeError(f"For 'FreezeOpt', 'opt' must be an Optimizer, but got {type(opt).__name__}.")
        if train_strategy is not None and train_parameter_groups is None:
            raise ValueError("For 'FreezeOpt', 'train_parameter_groups' must be given with 'train_strategy'.")
        if train_parameter_groups is None:
            train_parameter_groups = [list(opt.parameters)]
        if not isinstance(train_parameter_groups, (list, tuple)) or not train_parameter_groups:
            raise TypeError("For 'FreezeOpt', 'train_parameter_groups' must be a non-empty list or tuple, but got "
                            f"{train_parameter_groups!r}.")
        groups = [_group_parameters("FreezeOpt", group) for group in train_parameter_groups]
        known = {id(p) for p in opt.parameters}
        for group in groups:
            stray = [p.name for p in group if id(p) not in known]
            if stray or not group:
                raise ValueError(f"For 'FreezeOpt', every train group must be a non-empty subset of the optimizer's "
                                 f"parameters, but got {stray or 'an empty group'}.")
        self.strategy = self._strategy(train_strategy, len(groups))
        self.train_strategy = None if train_strategy is None else Tensor(self.strategy, mstype.int32)
        self.cyclic = bool(cyclic)
        self.groups_num = len(groups)
        self.optimizer = opt
        self.parameters = opt.parameters
        self.opts = tuple(_suffix_optimizer(opt, group) for group in groups)

    @staticmethod
    def _strategy(train_strategy, groups):
        if train_strategy is None:
            return tuple(range(groups))
        if isinstance(train_strategy, Tensor):
            if train_strategy.ndim != 1 or train_strategy.dtype != mstype.int32:
                raise ValueError("For 'FreezeOpt', a Tensor 'train_strategy' must be 1-D int32, but got "
                                 f"shape {train_strategy.shape} and dtype {train_strategy.dtype}.")
            train_strategy = train_strategy.asnumpy().tolist()
        if not isinstance(train_strategy, (list, tuple)) or not train_strategy:
            raise TypeError(f"For 'FreezeOpt', 'train_strategy' must be None, a non-empty list, tuple or Tensor, but "
                            f"got {type(train_strategy).__name__}.")
        for index in train_strategy:
            if isinstance(index, bool) or not isinstance(index, (int, np.integer)) or not 0 <= index < groups:
                raise ValueError(f"For 'FreezeOpt', every 'train_strategy' entry must be an int in [0, {groups}), "
                                 f"but got {index!r}.")
        return tuple(int(index) for index in train_strategy)


def unfrozen(optimizer):
    """The optimizer itself, or the optimizer a ``FreezeOpt`` wraps (the one a full step uses)."""
    return optimizer.optimizer if isinstance(optimizer, FreezeOpt) else optimizer


class GradientFreeze:
    """Builds the ``FreezeOpt`` of a network: groups and schedule. Drop-in for ``mindspore.boost.GradientFreeze``.

    Args:
        param_groups (int): number of train groups, >= 1. freeze_type (int): 0 continuous, 1 interval, 2
            progressive (see ``freeze_index_sequence``). freeze_p (float): in [0, 1], the fraction of steps that
            train every group. total_steps (int): training steps, >= 1. seed (int): the interval schedule's seed.

    Raises:
        ValueError: a bad ``freeze_type``, ``freeze_p``, ``param_groups``, ``total_steps`` or ``seed``.
    """

    def __init__(self, param_groups, freeze_type, freeze_p, total_steps, seed=0):
        _check_freeze_args("GradientFreeze", freeze_type, freeze_p)
        self._param_groups = _check_int("GradientFreeze", "param_groups", param_groups, 1)
        self._total_steps = _check_int("GradientFreeze", "total_steps", total_steps, 1)
        self._seed = _check_int("GradientFreeze", "seed", seed, 0, 2 ** 32 - 1)  # a NumPy RandomState seed
        self._freeze_type = freeze_type
        self._freeze_p = freeze_p

    def split_parameters_groups(self, net, freeze_para_groups_number):
        """``freeze_para_groups_number`` nested suffixes of ``net``'s trainable parameters: with ``L`` layers
        (``split_layers``) and ``s = L // groups``, group ``i`` holds layers ``i * s`` to the end.

        Raises:
            ValueError: more groups than layers.
        """
        groups = _check_int("GradientFreeze", "param_groups", freeze_para_groups_number, 1)
        layers = split_layers(net.trainable_params())
        if groups > len(layers):
            raise ValueError(f"For 'GradientFreeze', 'param_groups' must be at most the network's {len(layers)} "
                             f"layer(s) (a layer is a weight with its bias and BatchNorm), but got {groups}.")
        stride = len(layers) // groups
        return [sum(layers[i * stride:], []) for i in range(groups)]

    def generate_freeze_index_sequence(self, parameter_groups_number, freeze_strategy, freeze_p, total_steps):
        """The first trained group of each step (``freeze_index_sequence`` with this object's seed)."""
        return freeze_index_sequence(parameter_groups_number, freeze_strategy, freeze_p, total_steps, self._seed)

    def freeze_generate(self, network, optimizer):
        """``(network, FreezeOpt)``: the network unchanged and a ``FreezeOpt`` over its groups and schedule."""
        if not isinstance(optimizer, Optimizer):
            raise TypeError(f"For 'GradientFreeze', 'optimizer' must be an Optimizer, but got "
                            f"{type(optimizer).__name__}.")
        trained = {id(p) for p in optimizer.parameters}
        groups = [[p for p in group if id(p) in trained]
                  for group in self.split_parameters_groups(network, self._param_groups)]
        strategy = self.generate_freeze_index_sequence(self._param_groups, self._freeze_type, self._freeze_p,
                                                       self._total_steps)
        return network, FreezeOpt(optimizer, groups, strategy, cyclic=self._freeze_type != PROGRESSIVE)


def freeze_optimizer(config, network, optimizer):
    """The optimizer a train cell trains with: a ``FreezeOpt`` when the config's ``grad_freeze`` is on (unless
    ``optimizer`` already is one), else ``optimizer``."""
    if isinstance(optimizer, FreezeOpt) or not config.enabled("grad_freeze"):
        return optimizer
    return GradientFreeze(**config.section("grad_freeze")).freeze_generate(network, optimizer)[1]


class FreezeSchedule(nn.Cell):
    """Host-side dispatch of gradient freezing: before each step, pick the step of the scheduled suffix.

    The step for group ``k`` is ``full_step`` when group ``k``'s optimizer is the unfrozen one, else a train cell
    built by ``make_step(optimizer)`` over the suffix (on first use), whose Parameters are all the owner's and whose
    train/eval mode follows the owner's (``set_train``). After
    the step the position advances by the number of updates the optimizer really applied (its ``global_step``
    delta), so overflowing steps and accumulating micro-steps keep it.

    Args:
        freeze_opt (FreezeOpt): groups, suffix optimizers and strategy.

    Parameters (state, checkpointed):
        grad_freeze.position (int32): the position in the strategy, in ``[0, len(strategy))``.
        (``global_step`` is the optimizer's own Parameter, only read here.)
    """

    def __init__(self, freeze_opt):
        super().__init__(auto_prefix=False)
        self.strategy = freeze_opt.strategy
        self.cyclic = freeze_opt.cyclic
        floors = list(self.strategy)
        for t in range(len(floors) - 2, -1, -1):
            floors[t] = min(floors[t], floors[t + 1])
        self.floors = tuple(floors) if not self.cyclic else (min(self.strategy),) * len(floors)
        self.optimizers = (unfrozen(freeze_opt),) + freeze_opt.opts
        self.global_step = unfrozen(freeze_opt).global_step
        self.position = Parameter(Tensor(0, mstype.int32), name="grad_freeze.position", requires_grad=False)
        self.steps = None

    def current_index(self):
        """The first group the next step trains (host int); groups before it get no gradient."""
        return self.strategy[int(self.position.asnumpy())]

    def frozen_for_good(self):
        """The number of leading groups that no remaining step trains (host int): with a progressive schedule the
        current index, with a cyclic one the smallest index of the whole strategy (usually 0). A training loop
        may cache the outputs of that prefix, since its weights no longer change."""
        return self.floors[int(self.position.asnumpy())]

    def monitor_state(self):
        """Feature state for ``BoostMonitor``: the group the next step trains from."""
        return {"freeze_group": self.current_index()}

    def _updates(self):
        return int(self.global_step.asnumpy().reshape(-1)[0])

    def run(self, owner, full_step, make_step, *inputs):
        """One step of ``owner`` (a train cell) on ``inputs``."""
        if self.steps is None:
            built = {id(self.optimizers[0]): full_step}
            for optimizer in self.optimizers[1:]:
                if id(optimizer) not in built:
                    built[id(optimizer)] = share_parameters(make_step(optimizer), owner, who="grad_freeze")
            self.steps = tuple(built[id(optimizer)] for optimizer in self.optimizers[1:])
        position = int(self.position.asnumpy())
        step = self.steps[self.strategy[position]]
        if isinstance(step, nn.Cell) and step.training != owner.training:
            step.set_train(owner.training)
        before = self._updates()
        outputs = step(*inputs)
        applied = self._updates() - before
        if applied:
            position += applied
            length = len(self.strategy)
            position = position % length if self.cyclic else min(position, length - 1)
            self.position.set_data(Tensor(position, mstype.int32))
        return outputs


def freeze_cell(reducer_flag, network, optimizer, sens, grad, use_grad_accumulation, mean=None, degree=None,
                max_accumulation_step=1):
    """One train step per group of ``optimizer`` (a ``FreezeOpt``); drop-in for ``mindspore.boost.freeze_cell``.

    Each is a ``BoostTrainOneStepCell`` over the group's suffix optimizer, with gradient accumulation over
    ``max_accumulation_step`` micro-steps when ``use_grad_accumulation`` (sharing one buffer set, where the
    reference crashes), reducing across ranks as the current parallel context says; ``grad`` replaces its
    ``GradOperation`` when given.

    Raises:
        TypeError: ``optimizer`` is not a FreezeOpt. ValueError: ``reducer_flag``, ``mean`` or ``degree``
        disagree with the parallel context.
    """
    from ..distributed import parallel_info  # pylint: disable=import-outside-toplevel
    from ..train_cells import BoostTrainOneStepCell  # pylint: disable=import-outside-toplevel
    if not isinstance(optimizer, FreezeOpt):
        raise TypeError(f"For 'freeze_cell', 'optimizer' must be a FreezeOpt, but got {type(optimizer).__name__}.")
    info = parallel_info()
    if bool(reducer_flag) != info.distributed or (reducer_flag and (
            (mean is not None and bool(mean) != info.gradients_mean) or (degree not in (None, info.size)))):
        raise ValueError(f"For 'freeze_cell', reducer_flag={reducer_flag}, mean={mean}, degree={degree} disagree with "
                         f"the parallel context (distributed={info.distributed}, gradients_mean="
                         f"{info.gradients_mean}, size={info.size}).")
    config = {"level": "O0"}
    if use_grad_accumulation and max_accumulation_step > 1:
        config = {"boost": {"mode": "manual", "grad_accumulation": True},
                  "grad_accumulation": {"grad_accumulation_step": int(max_accumulation_step)}}
    cells = []
    for opt in optimizer.opts:
        cell = BoostTrainOneStepCell(network, opt, sens, boost_config=config)
        if grad is not None:
            cell.grad = grad
        cells.append(share_parameters(cell, cells[0], who="freeze_cell") if cells else cell)
    return tuple(cells)
