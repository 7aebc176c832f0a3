"""The suffix optimizers of gradient freezing: one optimizer per trained suffix, all sharing the user's state.

The parameters are split front to back into nested suffixes (group ``k`` = the layers from the ``k``-th boundary to the
end; ``boost_cells.freezing.suffixes.groups``). A step that trains from group ``k`` updates only group ``k``'s
parameters, with ``FreezeOpt.opts[k]``: the user's optimizer class and arguments over those parameters, re-pointed at
the user's optimizer state (moments, ``global_step``, learning rate; ``shared_state``). So a frozen parameter and its
state stay bit-identical while frozen, learning-rate schedules count every real update, and a checkpoint holds one set
of optimizer state under the usual names. """
from mindspore import Parameter, Tensor, nn
from mindspore.common import dtype as mstype
from mindspore.nn.optim import LARS, Optimizer

from ...mindspore_internals import optimizer_init_arguments
from ...rules import is_int
from ..schedule.plan import FreezePlan
from .shared_state import share_state

__all__ = ["FreezeOpt", "group_parameters", "unfrozen"]


def group_parameters(who, group):
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
        plan (FreezePlan): a config's schedule over these groups (``GradientFreeze`` passes it), instead of a
            strategy: a sequence drawn for the run, or the automatic schedule, which decides while training.

    Attributes:
        plan (FreezePlan): the schedule the train cell follows (from ``plan``, or the given strategy's; after the
            cell's ``fit_to_run``, the plan fitted to the run).
        strategy (tuple of int): its sequence (() for the automatic schedule); ``train_strategy`` as a Tensor.
        learning_rate, dynamic_lr: ``opt``'s initial learning rate and whether it changes per step, as the
            reference's (read-only).

    Raises:
        TypeError: ``opt`` is not an Optimizer, a group is not a list, or ``plan`` is not a FreezePlan.
        ValueError: a strategy without groups or with a plan, a plan of another number of groups, an index outside
        ``[0, groups)``, or a group parameter that ``opt`` does not update.
    """

    def __init__(self, opt, train_parameter_groups=None, train_strategy=None, *, cyclic=True, plan=None):
        super().__init__(auto_prefix=False)
        if not isinstance(opt, Optimizer):
            raise TypeError(f"For 'FreezeOpt', 'opt' must be an Optimizer, but got {type(opt).__name__}.")
        if train_strategy is not None and train_parameter_groups is None:
            raise ValueError("For 'FreezeOpt', 'train_parameter_groups' must be given with 'train_strategy'.")
        if train_strategy is not None and plan is not None:
            raise ValueError("For 'FreezeOpt', 'train_strategy' must be None with 'plan' (the plan holds the "
                             "schedule), but got both.")
        if plan is not None and not isinstance(plan, FreezePlan):
            raise TypeError(f"For 'FreezeOpt', 'plan' must be None or a FreezePlan, but got {type(plan).__name__}.")
        if train_parameter_groups is None:
            train_parameter_groups = [list(opt.parameters)]
        if not isinstance(train_parameter_groups, (list, tuple)) or not train_parameter_groups:
            raise TypeError("For 'FreezeOpt', 'train_parameter_groups' must be a non-empty list or tuple, but got "
                            f"{train_parameter_groups!r}.")
        groups = [group_parameters("FreezeOpt", group) for group in train_parameter_groups]
        known = {id(p) for p in opt.parameters}
        for group in groups:
            stray = [p.name for p in group if id(p) not in known]
            if stray or not group:
                raise ValueError(f"For 'FreezeOpt', every train group must be a non-empty subset of the optimizer's "
                                 f"parameters, but got {stray or 'an empty group'}.")
        if plan is None:
            plan = FreezePlan.from_sequence(self._strategy(train_strategy, len(groups)), len(groups), cyclic)
        self.groups_num = len(groups)
        self.fit(plan)
        self.optimizer = opt
        self.parameters = opt.parameters
        self.opts = tuple(_suffix_optimizer(opt, group) for group in groups)

    def fit(self, plan):
        """Hold ``plan`` as the schedule (the train cell's ``fit_to_run`` passes the plan it fitted its schedule to,
        so ``plan``, ``strategy`` and ``train_strategy`` describe the run it trains, not the one first assumed).

        Raises:
            ValueError: ``plan`` is made for another number of train groups.
        """
        if plan.groups != self.groups_num:
            raise ValueError(f"For 'FreezeOpt', 'plan' must be made for the {self.groups_num} train groups, but it "
                             f"has {plan.groups}.")
        self.plan = plan
        self.strategy = plan.sequence
        self.train_strategy = Tensor(plan.sequence, mstype.int32) if plan.sequence else None

    def segment_of(self):
        """``{id(parameter): segment}`` for every trained parameter: its segment is the last group that trains it
        (segment ``g``: what group ``g`` trains and group ``g + 1`` does not)."""
        segment_of = {}
        for index, opt in enumerate(self.opts):
            segment_of.update((id(p), index) for p in opt.parameters)
        return segment_of

    @property
    def learning_rate(self):
        """The optimizer's initial learning rate (``init_learning_rate``; a LARS's inner optimizer's), as the
        reference's ``FreezeOpt`` keeps it."""
        return self._base_optimizer().init_learning_rate

    @property
    def dynamic_lr(self):
        """Whether the optimizer's learning rate changes per step, as the reference's ``FreezeOpt`` keeps it."""
        return self._base_optimizer().dynamic_lr

    def _base_optimizer(self):
        """The optimizer that holds the learning rate: a LARS's inner optimizer, else the optimizer."""
        return self.optimizer.opt if isinstance(self.optimizer, nn.LARS) else self.optimizer

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
