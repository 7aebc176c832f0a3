"""The step factory: every step a train cell can take, built once in ``__init__`` from the public parts.

A step is value-and-grad over a set of weights, then the update strategy; a loss-scaled step puts an overflow
window (the detector's clear/read around the backward pass, unscaling by the loss-scale part), the part's policy
and a skip between the two. The train cells' full step, every frozen suffix of gradient freezing (selected in the
graph by ``FreezeSwitch``, or on a cached frozen prefix's outputs: ``make_prefix_cache``), ``freeze_cell``'s steps
and every pair of the GAN cell come from here. Suffix steps are
built over shared Parameters by construction: they hold the same loss-scale part and detector objects as the full
step, and their strategies reuse the full strategy's state (accumulation buffers and counter, AdaSum's saved
weights).
"""
from mindspore import nn, ops

from .config import BoostConfig
from .distributed import make_grad_reducer, parallel_info
from .freezing import (FreezeOpt, FreezeSwitch, FrozenPrefixCache, ScheduledStep, Stages, make_schedule, staged_network,
                       unfrozen)
from .updates import AdaSumUpdate, ApplyGradients, GradientAccumulation, make_dim_reduce

__all__ = ["ScaledStep", "Step", "caches_frozen_prefix", "freeze_cell", "freezing_schedule", "make_prefix_cache",
           "make_train_step", "make_update_strategy"]


def make_update_strategy(config, optimizer, info, network=None, shared=None):
    """The update strategy a config asks for: DimReduce (which re-runs ``network``, the network with loss), AdaSum
    or a plain reduced step, under accumulation if enabled.

    ``shared`` is the full step's strategy when this one serves a frozen suffix (``optimizer`` over some of its
    weights): the suffix strategy then uses its state. Stand-alone, AdaSum has one group, and the AdaSum of one
    group's weight delta is that delta: the plain step. So level O2 trains stand-alone, as the reference's does."""
    if config.enabled("dim_reduce"):
        return make_dim_reduce(config.section("dim_reduce"), network, optimizer, info)
    accumulating = config.accumulation_steps > 1
    if config.enabled("adasum") and info.distributed:
        inner = shared.apply_update if accumulating and shared is not None else shared
        apply = AdaSumUpdate(optimizer, info, config.section("common")["device_number"], shared=inner)
    else:
        apply = ApplyGradients(optimizer, make_grad_reducer(optimizer.parameters, info))
    if accumulating:
        return GradientAccumulation(config.accumulation_steps, optimizer, apply, shared=shared)
    return apply


class Step(nn.Cell):
    """One training step: the loss and the gradients of ``weights``, then the update strategy.

    Args:
        network (Cell): the network with loss. weights (ParameterTuple): the weights to differentiate (a suffix
            of the network's under gradient freezing; the backward pass stops at the first of them).
        update (Cell): the update strategy (``boost_cells.updates``). sens (float): the backward pass's start.
        observer (Cell): sees the gradients of every clean step (``construct(grads) -> token``: the automatic
            freezing schedule's statistics); default None.

    Inputs: ``*inputs``, the network's. Outputs: the loss.
    """

    def __init__(self, network, weights, update, sens=1.0, observer=None):
        super().__init__(auto_prefix=False)
        self.network = network
        self.weights = weights
        self.update = update
        self.sens = sens
        self.observer = observer
        self.grad = ops.GradOperation(get_by_list=True, sens_param=True)
        self.update_takes_inputs = getattr(update, "takes_inputs", False)

    def apply(self, loss, grads, inputs):
        """The update strategy's step; a strategy with ``takes_inputs`` (DimReduce) also gets the step's inputs."""
        if self.observer is not None:
            loss = ops.depend(loss, self.observer(grads))
        if self.update_takes_inputs:
            return self.update(loss, grads, *inputs)
        return self.update(loss, grads)

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
        overflow_detector (Cell): ``FiniteCheck`` or ``NPUFloatStatusCheck`` (``boost_cells.scaling``).

    Inputs: ``*inputs``. Outputs: ``(loss, overflow, loss_scale)``: the flag that decided the skip and a copy of
    the scale after the policy's update.
    """

    def __init__(self, network, weights, update, loss_scale, overflow_detector, observer=None):
        super().__init__(network, weights, update, observer=observer)
        self.loss_scale = loss_scale
        self.overflow_detector = overflow_detector

    def gradients(self, inputs):
        """One overflow window: the loss, the gradients of the backward pass started from the part's scale and
        unscaled by it, and the detector's overflow flag (computed last). ``inputs`` is the tuple of inputs."""
        scale = self.loss_scale.value()
        loss = self.network(*inputs)
        status, sens = self.overflow_detector.start(loss, ops.ones_like(loss) * ops.cast(scale, loss.dtype))
        grads = self.grad(self.network, self.weights)(*inputs, sens)
        grads = self.loss_scale.unscale(scale, grads)
        return loss, grads, self.overflow_detector(status, grads)

    def construct(self, *inputs):
        loss, grads, overflow = self.gradients(inputs)
        overflow, scale = self.loss_scale(overflow, grads)
        if not overflow:
            self.apply(loss, grads, inputs)
        return loss, overflow, scale


def _group_steps(network, optimizer, config, info, update, make_step):
    """One step per group of ``optimizer`` (a ``FreezeOpt``): ``make_step(network, opts[k], strategy)``, the
    unfrozen optimizer's step with ``update`` itself, each suffix's with a strategy sharing ``update``'s state;
    groups with the same optimizer share one step."""
    base = unfrozen(optimizer)
    built = {id(base): make_step(network, base, update)}
    for opt in optimizer.opts:
        if id(opt) not in built:
            built[id(opt)] = make_step(network, opt, make_update_strategy(config, opt, info, network, shared=update))
    return [built[id(opt)] for opt in optimizer.opts]


def _step_maker(schedule, sens, loss_scale, overflow_detector):
    """``make_step(network, opt, strategy)``: a ``Step`` (``ScaledStep`` with a ``loss_scale`` part) over ``opt``'s
    parameters, observed by the freezing ``schedule`` if it observes (None: no schedule)."""

    def make_step(network, opt, strategy):
        observer = None if schedule is None else schedule.observer(opt.parameters)
        if loss_scale is None:
            return Step(network, opt.parameters, strategy, sens, observer)
        return ScaledStep(network, opt.parameters, strategy, loss_scale, overflow_detector, observer)

    return make_step


def caches_frozen_prefix(config, optimizer):
    """Whether the config asks a train step over ``optimizer`` to cache its frozen prefix: a ``FreezeOpt`` and the
    config's ``grad_freeze.cache_frozen_prefix`` (the train cell decides whether it can)."""
    return isinstance(optimizer, FreezeOpt) and config.section("grad_freeze")["cache_frozen_prefix"]


def freezing_schedule(optimizer, info):
    """The freezing schedule of a train step over ``optimizer`` (``make_schedule``; all-reduced statistics when
    ``info`` is data-parallel), or None when it is not a ``FreezeOpt``."""
    return make_schedule(optimizer, info.distributed) if isinstance(optimizer, FreezeOpt) else None


def make_train_step(network, optimizer, config, info, update, *, schedule=None, cache_prefix=False, sens=1.0,
                    loss_scale=None, overflow_detector=None):
    """The step of a train cell over ``optimizer``: a ``Step`` (``ScaledStep`` with a ``loss_scale`` part), or for a
    ``FreezeOpt`` a ``FreezeSwitch`` over one such step per trained suffix, driven by ``schedule``
    (``freezing_schedule``). With ``cache_prefix`` every step that trains from a group ``k >= 1`` is taken on the
    frozen-prefix cache's host route (``make_prefix_cache``), so the switch holds the full step only (one compiled
    branch) and keeps the schedule.

    Args:
        network (Cell): the network with loss. optimizer (Cell): the optimizer, or a ``FreezeOpt``.
        config (BoostConfig): the suffix strategies' config. info (ParallelInfo): the parallel setting.
        update (Cell): the update strategy over the unfrozen optimizer (``make_update_strategy``).
        schedule (Cell): the ``FreezeOpt``'s schedule (required with one). cache_prefix (bool): the frozen steps
            run on the cache's route.
        sens (float): a plain step's backward start. loss_scale, overflow_detector (Cell): a loss-scaled step's.
    """
    make_step = _step_maker(schedule, sens, loss_scale, overflow_detector)
    if not isinstance(optimizer, FreezeOpt):
        return make_step(network, optimizer, update)
    global_step = unfrozen(optimizer).global_step
    if cache_prefix:
        full = make_step(network, unfrozen(optimizer), update)
        return FreezeSwitch(schedule, global_step, [full] * optimizer.groups_num)
    return FreezeSwitch(schedule, global_step, _group_steps(network, optimizer, config, info, update, make_step))


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


def make_prefix_cache(network, optimizer, config, info, update, switch, *, sens=1.0, loss_scale=None,
                      overflow_detector=None):
    """The frozen-prefix cache's segments and steps: ``(FrozenPrefixCache, {level: step})`` for a ``switch`` whose
    schedule freezes groups for good (``schedule.frozen_levels``).

    Level ``k`` (the schedule's ``frozen_for_good()``) trains from group ``k`` on the cached outputs of the stages
    before it: its step is a ``Step``/``ScaledStep`` (as ``make_train_step``'s) over ``opts[k]`` and the suffix
    network (``nn.WithLossCell`` of the remaining stages and the loss), its strategy sharing ``update``'s state,
    advancing the switch's schedule as the switch's own steps do (``ScheduledStep``). Segment ``j`` of the cache is
    the stages of group ``j`` that group ``j + 1`` does not train.

    Raises:
        TypeError: ``network`` has no stages (``staged_network``). ValueError: groups not at stage boundaries, or
            ``dim_reduce`` on (it re-runs the whole network).
    """
    if config.enabled("dim_reduce"):
        raise ValueError("'grad_freeze.cache_frozen_prefix' cannot be used with 'dim_reduce', whose line search "
                         "re-runs the whole network; switch one of them off.")
    staged = staged_network(network)
    schedule = switch.schedule
    starts = _stage_starts(staged, optimizer) + [len(staged.stages)]
    segments = [Stages(staged.stages[starts[j]:starts[j + 1]]) for j in range(optimizer.groups_num - 1)]
    make_step = _step_maker(schedule, sens, loss_scale, overflow_detector)
    steps = {}
    for level in schedule.frozen_levels:
        suffix = staged.suffix_with_loss(starts[level])
        opt = optimizer.opts[level]
        step = make_step(suffix, opt, make_update_strategy(config, opt, info, suffix, shared=update))
        steps[level] = ScheduledStep(schedule, switch.global_step, step)
    cache = FrozenPrefixCache(segments, config.section("grad_freeze")["cache_max_mb"] * 2 ** 20)
    return cache, steps


def freeze_cell(reducer_flag, network, optimizer, sens, grad, use_grad_accumulation, mean=None, degree=None,
                max_accumulation_step=1):
    """One train step per group of ``optimizer`` (a ``FreezeOpt``); drop-in for ``mindspore.boost.freeze_cell``.

    Each is a ``Step`` over the group's suffix optimizer, with gradient accumulation over ``max_accumulation_step``
    micro-steps when ``use_grad_accumulation`` (all sharing one buffer set, where the reference crashes), reducing
    across ranks as the current parallel context says; ``grad`` replaces its ``GradOperation`` when given.

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
    return tuple(_group_steps(network, optimizer, config, info, update, make_step))
