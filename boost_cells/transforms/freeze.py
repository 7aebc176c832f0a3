"""Gradient freezing: on each step only a suffix of the network's parameter groups trains.

The parameters are split front to back into ``param_groups`` nested suffixes (group ``k`` = the layers from the
``k``-th boundary to the end); a schedule (the *train strategy*) says, step by step, from which group training
starts. A step that trains from group ``k`` computes no gradient for the groups before it: its ``GradOperation``
covers the suffix's weights only, so the backward pass stops at the first trained layer. ``FreezeSwitch`` picks
that step inside the compiled graph, indexed by the schedule position (a Parameter), as the reference indexes its
``freeze_nets`` by a Tensor: freezing holds however MindSpore calls the train cell (directly, nested in another
Cell's graph as dataset sink mode does, from a subclass's ``construct``, in PyNative).

Every suffix optimizer shares the state of the user's optimizer (moments, ``global_step``, learning rate), so a
frozen parameter and its state stay bit-identical while frozen, and learning-rate schedules count every real
update. The schedule position advances by the updates a step really applied (the optimizer's ``global_step``
increments): an overflowing step or an accumulating micro-step keeps the position, so every micro-step of an
accumulation cycle trains the same suffix.
"""
import numpy as np
from mindspore import Parameter, Tensor, nn, ops
from mindspore.common import dtype as mstype
from mindspore.nn.optim import LARS, Optimizer

from ..mindspore_internals import optimizer_init_arguments
from ..rules import check, is_int
from .auto_freeze import AutoFreeze
from .prefix_cache import staged_network
from .shared_state import share_state

__all__ = ["GradientFreeze", "FreezeOpt", "FreezeSwitch", "IndexedCellList", "ScheduledStep", "freeze_optimizer",
           "freeze_index_sequence", "split_layers", "unfrozen", "AUTO", "CONTINUOUS", "INTERVAL", "PROGRESSIVE"]

CONTINUOUS, INTERVAL, PROGRESSIVE, AUTO = 0, 1, 2, 3
FREEZE_TYPES = (CONTINUOUS, INTERVAL, PROGRESSIVE, AUTO, "auto")


def _check_freeze_args(who, freeze_type, freeze_p):
    check(who, "freeze_type", freeze_type)
    check(who, "freeze_p", freeze_p)


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
    if freeze_type in (AUTO, "auto"):
        raise ValueError("For 'GradientFreeze', freeze_type 3 ('auto') has no sequence in advance: it decides while "
                         "training (boost_cells.transforms.auto_freeze).")
    groups = int(check("GradientFreeze", "param_groups", groups))
    total_steps = int(check("GradientFreeze", "total_steps", total_steps))
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


def _suffix_groups(base, params, wanted):
    """``base``'s group dicts restricted to the Parameters in ``wanted`` (ids), in their order, with every option
    kept. A group left empty is dropped; an ``order_params`` group (the model zoo's ``init_group_params`` ends with
    ``{"order_params": net.trainable_params()}``) lists exactly the kept Parameters, in ``base``'s order (which is
    that group's order), so the suffix optimizer orders its parameters, weight decays and learning rates as the
    original does."""
    groups, dropped = [], False
    for group in params:
        if "order_params" in group:
            groups.append({"order_params": [p for p in base.parameters if id(p) in wanted]})
            continue
        kept = [p for p in group["params"] if id(p) in wanted]
        if kept:
            groups.append({**group, "params": kept})
        dropped = dropped or not kept
    if base.dynamic_lr and base.is_group_lr and dropped:
        raise ValueError("For 'FreezeOpt', an optimizer with a dynamic learning rate per group cannot drop a "
                         "whole group when freezing; give every group a parameter in each trained suffix.")
    return groups


def _suffix_optimizer(base, parameters):
    """An optimizer of ``base``'s class and arguments over ``parameters`` that uses ``base``'s state (LARS: around
    such an optimizer of its inner one). Group dicts are split by ``_suffix_groups``."""
    wanted = {id(p) for p in parameters}
    if len(wanted) == len(base.parameters):
        return base
    if isinstance(base, LARS):
        suffix = LARS(_suffix_optimizer(base.opt, parameters), **optimizer_init_arguments(base)[2])
        return share_state(suffix, base, who="FreezeOpt")
    params, learning_rate, args = optimizer_init_arguments(base)
    if isinstance(params[0], dict):
        params = _suffix_groups(base, params, wanted)
    else:
        params = [p for p in params if id(p) in wanted]
    suffix = type(base)(params, learning_rate=learning_rate, **args)
    return share_state(suffix, base, who="FreezeOpt")


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
        auto (AutoFreeze): the automatic schedule (``freeze_type`` 3), which replaces the strategy: the train step
            trains from group ``auto.frozen``, decided while training.

    Raises:
        TypeError: ``opt`` is not an Optimizer, or a group is not a list. ValueError: a strategy without
        groups, an index outside ``[0, groups)``, or a group parameter that ``opt`` does not update.
    """

    def __init__(self, opt, train_parameter_groups=None, train_strategy=None, *, cyclic=True, auto=None):
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
        self.auto = auto

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
            if not is_int(index) or not 0 <= index < groups:
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
            progressive (see ``freeze_index_sequence``), 3 or "auto": front groups freeze for good once converged
            (``boost_cells.transforms.auto_freeze``). freeze_p (float): in [0, 1], the fraction of steps that
            train every group. total_steps (int): training steps, >= 1. seed (int): the interval schedule's seed.
        auto_interval (int): updates between two decisions of the automatic schedule, >= 1. auto_warmup (int):
            updates before it may freeze, >= 0. auto_threshold (float): in (0, 1), the relative change of a
            segment's mean gradient norm between two intervals below which it counts as converged.
        cache_frozen_prefix (bool): cut the groups at the network's stage boundaries (``staged_network``), so that a
            train cell can cache the outputs of the groups frozen for good. cache_max_mb (int): that cache's memory,
            in MB (read by the train cell).

    Raises:
        ValueError: a bad ``freeze_type``, ``freeze_p``, ``param_groups``, ``total_steps`` or ``seed``.
    """

    def __init__(self, param_groups, freeze_type, freeze_p, total_steps, seed=0, auto_interval=100, auto_warmup=200,
                 auto_threshold=0.05, cache_frozen_prefix=False, cache_max_mb=2048):
        _check_freeze_args("GradientFreeze", freeze_type, freeze_p)
        self.cache_frozen_prefix = bool(check("GradientFreeze", "cache_frozen_prefix", cache_frozen_prefix))
        check("GradientFreeze", "cache_max_mb", cache_max_mb)
        self._auto = (int(check("GradientFreeze", "auto_interval", auto_interval)),
                      int(check("GradientFreeze", "auto_warmup", auto_warmup)),
                      float(check("GradientFreeze", "auto_threshold", auto_threshold)))
        self._param_groups = int(check("GradientFreeze", "param_groups", param_groups))
        self._total_steps = int(check("GradientFreeze", "total_steps", total_steps))
        self._seed = int(check("GradientFreeze", "seed", seed))
        self._freeze_type = freeze_type
        self._freeze_p = freeze_p

    def split_parameters_groups(self, net, freeze_para_groups_number):
        """``freeze_para_groups_number`` nested suffixes of ``net``'s trainable parameters: with ``L`` layers
        (``split_layers``) and ``s = L // groups``, group ``i`` holds layers ``i * s`` to the end. With
        ``cache_frozen_prefix`` a layer is a stage of the network (``staged_network``) that has trainable
        parameters, so every group starts at a stage boundary and a frozen prefix is whole stages.

        Raises:
            ValueError: more groups than layers. TypeError: ``cache_frozen_prefix`` and a network without stages.
        """
        groups = int(check("GradientFreeze", "freeze_para_groups_number", freeze_para_groups_number))
        if self.cache_frozen_prefix:
            layers = [layer for layer in (stage.trainable_params() for stage in staged_network(net).stages) if layer]
            what = "stage(s) with trainable parameters (the frozen-prefix cache freezes whole stages)"
        else:
            layers = split_layers(net.trainable_params())
            what = "layer(s) (a layer is a weight with its bias and BatchNorm)"
        if groups > len(layers):
            raise ValueError(f"For 'GradientFreeze', 'param_groups' must be at most the network's {len(layers)} "
                             f"{what}, but got {groups}.")
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
        if self._freeze_type in (AUTO, "auto"):
            segment = {}
            for index, group in enumerate(groups):
                segment.update((id(p), index) for p in group)
            auto = AutoFreeze(segment, len(groups), *self._auto)
            return network, FreezeOpt(optimizer, groups, auto=auto)
        strategy = self.generate_freeze_index_sequence(self._param_groups, self._freeze_type, self._freeze_p,
                                                       self._total_steps)
        return network, FreezeOpt(optimizer, groups, strategy, cyclic=self._freeze_type != PROGRESSIVE)


def freeze_optimizer(config, network, optimizer):
    """The optimizer a train cell trains with: a ``FreezeOpt`` when the config's ``grad_freeze`` is on (unless
    ``optimizer`` already is one), else ``optimizer``."""
    if isinstance(optimizer, FreezeOpt) or not config.enabled("grad_freeze"):
        return optimizer
    return GradientFreeze(**config.section("grad_freeze")).freeze_generate(network, optimizer)[1]


class IndexedCellList(nn.CellList):
    """A ``CellList`` that an int32 scalar Tensor indexes in both execution modes: GRAPH_MODE compiles
    ``cells[index]`` into one switch over the cells (MindSpore's ``switch_layer``), PYNATIVE_MODE reads the index on
    the host. A slice gives a plain list (``nn.CellList`` would build a prefixing CellList that renames the
    parameters of every cell in it)."""

    def __getitem__(self, index):
        if isinstance(index, Tensor):
            index = int(index.asnumpy().reshape(-1)[0])
        if isinstance(index, slice):
            return list(self)[index]
        return super().__getitem__(index)


class FreezeSwitch(nn.Cell):
    """Gradient freezing inside the graph: the schedule position selects the step of the scheduled suffix.

    ``steps[k]`` is the train step over ``freeze_opt.opts[k]`` (groups whose optimizer is the same object may share
    one step); only the steps the strategy uses are compiled, as branches of one switch. After the step the position
    advances by the updates the optimizer really applied (its ``global_step`` delta): cyclic strategies wrap around,
    others hold their last entry. With the automatic schedule (``freeze_opt.auto``) the branch is
    ``auto.frozen`` instead, every group's step compiles, and the position stays at 0.

    Args:
        freeze_opt (FreezeOpt): groups, suffix optimizers and strategy.
        steps (list of Cell): one step per group, all with the same inputs and outputs.

    Parameters (state, checkpointed):
        grad_freeze.position (int32): the position in the strategy, in ``[0, len(strategy))``.
        (``global_step`` is the optimizer's own Parameter, only read here.)

    Inputs: the steps' inputs. Outputs: the selected step's outputs.
    """

    def __init__(self, freeze_opt, steps):
        super().__init__(auto_prefix=False)
        self.strategy = freeze_opt.strategy
        self.cyclic = freeze_opt.cyclic
        floors = list(self.strategy)
        for t in range(len(floors) - 2, -1, -1):
            floors[t] = min(floors[t], floors[t + 1])
        self.floors = tuple(floors) if not self.cyclic else (min(self.strategy),) * len(floors)
        self.auto = freeze_opt.auto
        used = range(len(steps)) if self.auto is not None else sorted(set(self.strategy))
        branches, branch_of = [], {}
        for group in used:
            if id(steps[group]) not in branch_of:
                branch_of[id(steps[group])] = len(branches)
                branches.append(steps[group])
        self.steps = IndexedCellList(branches, auto_prefix=False)
        self.branch_at = Tensor(np.array([branch_of[id(steps[group])] for group in self.strategy], np.int32))
        self.length = len(self.strategy)
        self.global_step = unfrozen(freeze_opt).global_step
        self.position = Parameter(Tensor(0, mstype.int32), name="grad_freeze.position", requires_grad=False)

    def current_index(self):
        """The first group the next step trains (host int); groups before it get no gradient."""
        if self.auto is not None:
            return self.auto.frozen_for_good()
        return self.strategy[int(self.position.asnumpy())]

    def frozen_for_good(self):
        """The number of leading groups that no remaining step trains (host int): with a progressive schedule the
        current index, with a cyclic one the smallest index of the whole strategy (usually 0), with the automatic
        one the groups it froze. A training loop may cache the outputs of that prefix, since its weights no longer
        change."""
        if self.auto is not None:
            return self.auto.frozen_for_good()
        return self.floors[int(self.position.asnumpy())]

    def monitor_state(self):
        """Feature state for ``BoostMonitor``: the group the next step trains from."""
        return {"freeze_group": self.current_index()}

    def updates_so_far(self):
        """The optimizer's update count before a step (graph code)."""
        return ops.reshape(self.global_step, ()) + 0

    def advanced(self, before, outputs):
        """``outputs`` of a step, after the position moved by the updates it applied since ``before`` (graph code;
        only for the position-driven schedules: the automatic one has no position)."""
        applied = ops.reshape(ops.depend(self.global_step, outputs), ()) - before
        position = self.position + applied
        if self.cyclic:
            position = position % self.length
        else:
            position = ops.minimum(position, self.length - 1)
        return ops.depend(outputs, ops.assign(self.position, position))

    def construct(self, *inputs):
        if self.auto is not None:
            return self.steps[self.branch_at[self.auto.frozen]](*inputs)
        before = self.updates_so_far()
        return self.advanced(before, self.steps[self.branch_at[self.position]](*ops.depend(inputs, before)))


class ScheduledStep(nn.Cell):
    """A step taken outside a ``FreezeSwitch`` (on a cached frozen prefix's outputs) that still moves the switch's
    schedule position by the updates it applied, as the switch's own steps do.

    Args:
        switch (FreezeSwitch): the schedule. step (Cell): the step.

    Inputs and outputs: the step's.
    """

    def __init__(self, switch, step):
        super().__init__(auto_prefix=False)
        self.switch = switch
        self.step = step

    def construct(self, *inputs):
        before = self.switch.updates_so_far()
        return self.switch.advanced(before, self.step(*ops.depend(inputs, before)))
