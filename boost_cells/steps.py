"""The step builder: every step a train cell can take, built once, in one place, from the public parts.

A step is value-and-grad over a set of weights, then the update strategy (``boost_cells.updates``); a loss-scaled
step puts an overflow window (the detector's clear/read around the backward pass, unscaling by the loss-scale part),
the part's policy and a skip between the two. Every step returns ``(outputs, applied)``: the train cell's outputs and
the optimizer updates its strategy applied (0 on an overflow or an accumulating micro-step), by which a freezing
schedule advances.

``build_step`` returns a ``BuiltStep``: the train step (one ``Step``, or with gradient freezing a ``FreezeSwitch``
over one step per trained suffix, selected in the graph), the update strategy of the full step, the freezing
schedule, and, where the frozen levels are taken on the host (payback, the frozen-prefix cache), their route
(``FrozenLevelRoute``). Suffix steps are built over shared state by the strategy contract (``for_suffix``) and hold
the same loss-scale part and detector objects as the full step. The GAN cell's pairs and ``freeze_cell``'s steps
come from here too.
"""
import dataclasses

from mindspore import nn, ops

from .config import BoostConfig
from .user_warnings import warn_user
from .distributed import parallel_info
from .freezing import FreezeOpt, FreezeSwitch, FrozenPrefixCache, ScheduledStep, Stages, make_schedule, staged_network
from .freezing import unfrozen
from .freezing.host.ledger import CostLedger
from .freezing.host.payback import layer_shares
from .host_hooks import FrozenLevelRoute
from .scaling.overflow import with_unscale
from .updates import AdaSumUpdate, ApplyGradients, GradientAccumulation, make_dim_reduce

__all__ = ["BuiltStep", "ScaledStep", "Step", "StepOutputs", "build_step", "freeze_cell", "make_update_strategy"]


def make_update_strategy(config, optimizer, info, network=None):
    """The update strategy a config asks for over ``optimizer``: DimReduce (which re-runs ``network``, the network
    with loss), AdaSum or a plain reduced step, under accumulation if enabled. Stand-alone, AdaSum has one group, and
    the AdaSum of one group's weight delta is that delta: the plain step. So level O2 trains stand-alone, as the
    reference's does."""
    if config.enabled("dim_reduce"):
        return make_dim_reduce(config.section("dim_reduce"), network, optimizer, info)
    if config.enabled("adasum") and info.distributed:
        apply = AdaSumUpdate(optimizer, info, config.section("common")["device_number"])
    else:
        apply = ApplyGradients(optimizer, info)
    if config.accumulation_steps > 1:
        return GradientAccumulation(config.accumulation_steps, optimizer, apply)
    return apply


class Step(nn.Cell):
    """One training step: the loss and the gradients of ``weights``, then the update strategy.

    Args:
        network (Cell): the network with loss. weights (ParameterTuple): the weights to differentiate (a suffix
            of the network's under gradient freezing; the backward pass stops at the first of them).
        update (UpdateStrategy): the update strategy. sens (float): the backward pass's start.

    Inputs: ``*inputs``, the network's. Outputs: ``(loss, applied)``.
    """

    def __init__(self, network, weights, update, sens=1.0):
        super().__init__(auto_prefix=False)
        self.network = network
        self.weights = weights
        self.update = update
        self.sens = sens
        self.grad = ops.GradOperation(get_by_list=True, sens_param=True)

    def apply(self, loss, grads, inputs):
        """The update strategy's step on a clean step's gradients: ``(loss, applied)``."""
        return self.update.step(loss, grads, inputs)

    def construct(self, *inputs):
        loss = self.network(*inputs)
        sens = ops.fill(loss.dtype, loss.shape, self.sens)
        grads = self.grad(self.network, self.weights)(*inputs, sens)
        return self.apply(loss, grads, inputs)


class ScaledStep(Step):
    """One loss-scaled step: an overflow window, the loss-scale part's policy, and the update on a clean step only.

    Args:
        network, weights, update: as ``Step``.
        loss_scale (Cell): the loss-scale part (``LossScale``, ``GroupLossScale`` or ``HeldLossScale``).
        overflow_detector (Cell): ``FiniteCheck`` or ``NPUFloatStatusCheck`` (``boost_cells.scaling``), or one of
            one's own with only ``start`` and ``construct`` (``UnscaleThenCheck`` gives it ``unscale_and_check``).

    Inputs: ``*inputs``. Outputs: ``((loss, overflow, loss_scale), applied)``: the flag that decided the skip and a
    copy of the scale after the policy's update.
    """

    def __init__(self, network, weights, update, loss_scale, overflow_detector):
        super().__init__(network, weights, update)
        self.loss_scale = loss_scale
        self.overflow_detector = with_unscale(overflow_detector)

    def gradients(self, inputs):
        """One overflow window: the loss, the gradients of the backward pass started from the part's scale and
        unscaled by it, and the detector's overflow flag (the detector unscales and checks in one pass).
        ``inputs`` is the tuple of inputs."""
        scale = self.loss_scale.value()
        loss = self.network(*inputs)
        status, sens = self.overflow_detector.start(loss, ops.ones_like(loss) * ops.cast(scale, loss.dtype))
        grads = self.grad(self.network, self.weights)(*inputs, sens)
        grads, overflow = self.overflow_detector.unscale_and_check(status, grads,
                                                                   self.loss_scale.inverses(scale, grads))
        return loss, grads, overflow

    def construct(self, *inputs):
        loss, grads, overflow = self.gradients(inputs)
        overflow, scale = self.loss_scale(overflow, grads)
        applied = self.update.no_update
        if not overflow:
            _, applied = self.apply(loss, grads, inputs)
        return (loss, overflow, scale), applied


class StepOutputs(nn.Cell):
    """A step's outputs without its applied count: what a train cell, or the reference's ``freeze_nets``, returns.

    Args:
        step (Cell): a step returning ``(outputs, applied)``.
    """

    def __init__(self, step):
        super().__init__(auto_prefix=False)
        self.step = step

    def construct(self, *inputs):
        return self.step(*inputs)[0]


def _step_maker(sens, loss_scale, overflow_detector):
    """``make_step(network, opt, strategy)``: a ``Step`` (``ScaledStep`` with a ``loss_scale`` part) over ``opt``'s
    parameters."""

    def make_step(network, opt, strategy):
        if loss_scale is None:
            return Step(network, opt.parameters, strategy, sens)
        return ScaledStep(network, opt.parameters, strategy, loss_scale, overflow_detector)

    return make_step


def _group_steps(network, optimizer, update, make_step):
    """One step per group of ``optimizer`` (a ``FreezeOpt``): ``make_step(network, opts[k], strategy)``, the
    unfrozen optimizer's step with ``update`` itself, each suffix's with ``update.for_suffix``; groups with the same
    optimizer share one step."""
    base = unfrozen(optimizer)
    built = {id(base): make_step(network, base, update)}
    for opt in optimizer.opts:
        if id(opt) not in built:
            built[id(opt)] = make_step(network, opt, update.for_suffix(opt))
    return [built[id(opt)] for opt in optimizer.opts]


@dataclasses.dataclass(frozen=True)
class BuiltStep:
    """What ``build_step`` built.

    Attributes:
        train_step (Cell): the step a train cell's ``construct`` runs; ``(outputs, applied)``.
        update (UpdateStrategy): the full step's update strategy.
        schedule (Cell): the freezing schedule (``train_step`` is then a ``FreezeSwitch``); None without freezing.
        freeze_nets (tuple of Cell): with freezing, one step per group (``freeze_nets[k]`` trains from group ``k``
            and returns the train cell's outputs, as the reference's ``freeze_nets``; it does not advance the
            schedule); None without freezing.
        level_route (FrozenLevelRoute): the frozen levels' host route (payback, the frozen-prefix cache); None where
            neither applies.
    """

    train_step: nn.Cell
    update: nn.Cell
    schedule: nn.Cell = None
    level_route: object = None
    freeze_nets: tuple = None


def build_step(network, optimizer, config, info, *, who, own_construct=True, sens=1.0, loss_scale=None,
               overflow_detector=None):
    """Every step a train cell over ``network`` and ``optimizer`` can take, as ``config`` asks (see the module).

    Args:
        network (Cell): the network with loss. optimizer (Cell): the optimizer, or a ``FreezeOpt``.
        config (BoostConfig): the config. info (ParallelInfo): the parallel setting.
        who (str): the train cell's name, for warnings. own_construct (bool): the cell runs its own ``construct``
            (False: a subclass's, which the frozen-prefix cache's host route would bypass, so it is left out).
        sens (float): a plain step's backward start. loss_scale, overflow_detector (Cell): a loss-scaled step's.

    Returns:
        BuiltStep.

    Warns:
        BoostConfigWarning: the config asks for the frozen-prefix cache where it cannot apply (a subclass's own
            ``construct``, a schedule that never freezes for good); the cell freezes without it.
    """
    update = make_update_strategy(config, unfrozen(optimizer), info, network)
    if not isinstance(optimizer, FreezeOpt):
        step = _step_maker(sens, loss_scale, overflow_detector)(network, optimizer, update)
        return BuiltStep(step, update)
    schedule = make_schedule(optimizer, info)
    make_step = _step_maker(sens, loss_scale, overflow_detector)
    steps = _group_steps(network, optimizer, update, make_step)
    route = None
    cache = _cache_applies(config, network, optimizer, schedule, who, own_construct)
    payback = _payback_applies(schedule, who, own_construct)
    if cache or payback:  # schedule.plan.host_route, less what this network and cell exclude
        judge_cache = cache and config.section("grad_freeze")["cache_frozen_prefix"] == "auto"
        route = _level_route(network, optimizer, config, info, update, schedule, steps, make_step, cache, payback,
                             judge_cache)
    freeze_nets = tuple(StepOutputs(step) for step in steps)
    return BuiltStep(FreezeSwitch(schedule, steps), update, schedule, route, freeze_nets)


def _payback_applies(schedule, who, own_construct):
    """Whether the run's measured costs decide the frozen levels (``grad_freeze.payback``, the automatic schedule
    with more than one group): the cell must run its own ``construct``, as the levels' steps are taken on the host;
    a subclass's own ``construct`` freezes with the levels compiled with its step, with a warning naming the key."""
    plan = schedule.plan
    if not plan.payback or plan.groups < 2:
        return False
    if not own_construct:
        warn_user(f"For '{who}', 'grad_freeze.payback' is left out: it takes the frozen levels' steps on the host, "
                  "around construct, so this subclass's own construct would not run on them. The cell freezes the "
                  "whole front at once, that level compiled with its step; set the key to false to silence this.")
        return False
    return True


def _layer_shares(optimizer):
    """Per group of ``optimizer`` (a ``FreezeOpt``), the share of the trained layers (weights of two or more
    dimensions) in the segments before it (``layer_shares``)."""
    segment_of, layers = optimizer.segment_of(), [0] * optimizer.groups_num
    for weight in unfrozen(optimizer).parameters:
        if len(weight.shape) >= 2:
            layers[segment_of[id(weight)]] += 1
    return layer_shares(layers)


def _cache_applies(config, network, optimizer, schedule, who, own_construct):
    """Whether the frozen-prefix cache applies: the config asks for it, the cell runs its own ``construct`` and the
    schedule freezes groups for good. Where the config asks for it (true) but it cannot apply, warn, naming the key.
    With "auto" it applies where it can (the automatic schedule, the network's stages, groups cut at them, no
    ``dim_reduce``, the cell's own ``construct``) and is off elsewhere, without a warning: that is what "auto"
    asks."""
    section = config.section("grad_freeze")
    if section["cache_frozen_prefix"] == "auto":
        if not (own_construct and schedule.plan.may_cache and not config.enabled("dim_reduce")):
            return False
        try:
            _stage_starts(staged_network(network), optimizer)
        except (TypeError, ValueError):
            return False
        return True
    if not section["cache_frozen_prefix"]:
        return False
    if not own_construct:
        warn_user(f"For '{who}', 'grad_freeze.cache_frozen_prefix' is left out: the cache takes frozen steps on the "
                  "host, around construct, so this subclass's own construct would not run on them. The cell freezes "
                  "without the cache; set the key to false to silence this.")
        return False
    if not schedule.frozen_levels:
        warn_user(f"'grad_freeze.cache_frozen_prefix' is on, but the freezing schedule (freeze_type "
                  f"{section['freeze_type']!r}) never freezes a group for good (continuous and interval schedules "
                  "train every group again), so nothing is cached. Use freeze_type 2 (progressive) or 'auto', or "
                  "switch the cache off.")
        return False
    if config.enabled("dim_reduce"):
        raise ValueError("'grad_freeze.cache_frozen_prefix' cannot be used with 'dim_reduce', whose line search "
                         "re-runs the whole network; switch one of them off.")
    return True


def _stage_starts(staged, optimizer):
    """Per group of ``optimizer``, the index of the stage where it starts; every group must be all the optimizer's
    parameters from that stage on."""
    stage_of = {id(p): index for index, stage in enumerate(staged.stages) for p in stage.trainable_params()}
    trained = unfrozen(optimizer).parameters
    starts = []
    for opt in optimizer.opts:
        start = min(stage_of.get(id(p), len(staged.stages)) for p in opt.parameters)
        expected = {id(p) for p in trained if stage_of.get(id(p), -1) >= start}
        if {id(p) for p in opt.parameters} != expected or start == len(staged.stages):
            raise ValueError("'grad_freeze.cache_frozen_prefix' needs freezing groups that start at stage boundaries "
                             "(each group: every trained parameter from one stage on), but a group does not; let the "
                             "config build the FreezeOpt (GradientFreeze(..., cache_frozen_prefix=True)).")
        starts.append(start)
    return [0] + starts[1:]


def _level_route(network, optimizer, config, info, update, schedule, group_steps, make_step, cache, payback,
                 judge_cache):
    """The host route of the frozen levels (``FrozenLevelRoute``), for a schedule that freezes groups for good
    (``schedule.frozen_levels``): with ``payback``, the ledger and the layer shares that decide which levels pay; with
    ``cache``, the frozen-prefix cache, which weighs its own payback from the ledger with ``judge_cache``.

    On the batch, level ``k`` (the schedule's ``frozen_for_good()``) takes ``group_steps[k]``, the switch's own
    branch, as a separate graph compiled when first taken. With the cache, level ``k`` trains from group ``k`` on the
    cached outputs of the stages before it: its step is a ``Step``/``ScaledStep`` over ``opts[k]`` and the suffix
    network (``nn.WithLossCell`` of the remaining stages and the loss), its strategy ``update.for_suffix``. Every
    route step counts the schedule's updates (``ScheduledStep``, its outputs the step's alone); the route takes
    the schedule's decisions itself, with the same rule, op by op between two steps (``decide_now``), so a step between
    decisions compiles and runs no decision branch. Segment ``j`` of the cache is the stages of group ``j`` that group
    ``j + 1`` does not train.

    Raises:
        TypeError: with the cache, ``network`` has no stages (``staged_network``). ValueError: groups not at stage
            boundaries.
    """
    levels = (0, *schedule.frozen_levels)
    uncached = {level: ScheduledStep(schedule, group_steps[level]) for level in levels}
    measured = payback or judge_cache
    ledger = CostLedger(schedule.plan.groups) if measured else None
    shares = _layer_shares(optimizer) if measured else None
    accumulation = config.accumulation_steps
    if not cache:
        return FrozenLevelRoute(schedule, uncached, ledger, shares, accumulation, info=info, payback=payback)
    staged = staged_network(network)
    starts = _stage_starts(staged, optimizer) + [len(staged.stages)]
    segments = [Stages(staged.stages[starts[j]:starts[j + 1]]) for j in range(optimizer.groups_num - 1)]
    cached = {}
    for level in schedule.frozen_levels:
        suffix = staged.suffix_with_loss(starts[level])
        opt = optimizer.opts[level]
        cached[level] = ScheduledStep(schedule, make_step(suffix, opt, update.for_suffix(opt)))
    prefix_cache = FrozenPrefixCache(segments, config.section("grad_freeze")["cache_max_mb"] * 2 ** 20)
    return FrozenLevelRoute(schedule, uncached, ledger, shares, accumulation, prefix_cache, cached, info, payback,
                            judge_cache)


def freeze_cell(reducer_flag, network, optimizer, sens, grad, use_grad_accumulation, mean=None, degree=None,
                max_accumulation_step=1):
    """One train step per group of ``optimizer`` (a ``FreezeOpt``); drop-in for ``mindspore.boost.freeze_cell``.

    Each returns the loss, as the reference's ``freeze_nets`` do: a ``Step`` over the group's suffix optimizer, with
    gradient accumulation over ``max_accumulation_step`` micro-steps when ``use_grad_accumulation`` (all sharing one
    buffer set, where the reference crashes), reducing across ranks as the current parallel context says; ``grad``
    replaces its ``GradOperation`` when given.

    Raises:
        TypeError: ``optimizer`` is not a FreezeOpt. ValueError: ``reducer_flag``, ``mean`` or ``degree``
        disagree with the parallel context.
    """
    if not isinstance(optimizer, FreezeOpt):
        raise TypeError(f"For 'freeze_cell', 'optimizer' must be a FreezeOpt, but got {type(optimizer).__name__}.")
    info = parallel_info()
    if bool(reducer_flag) != info.distributed or (reducer_flag and (
            (mean is not None and bool(mean) != info.gradients_mean) or (degree not in (None, info.size)))):
        raise ValueError(f"For 'freeze_cell', reducer_flag={reducer_flag}, mean={mean}, degree={degree} disagree with "
                         f"the parallel context (distributed={info.distributed}, gradients_mean="
                         f"{info.gradients_mean}, size={info.size}).")
    config = BoostConfig.level("O0")
    if use_grad_accumulation and max_accumulation_step > 1:
        config = BoostConfig.from_dict({"boost": {"mode": "manual", "grad_accumulation": True},
                                        "grad_accumulation": {"grad_accumulation_step": int(max_accumulation_step)}})

    def make_step(step_network, opt, strategy):
        step = Step(step_network, opt.parameters, strategy, sens)
        if grad is not None:
            step.grad = grad
        return step

    update = make_update_strategy(config, unfrozen(optimizer), info, network)
    return tuple(StepOutputs(step) for step in _group_steps(network, optimizer, update, make_step))
