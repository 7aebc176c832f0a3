"""The train cells: ``nn.TrainOneStepCell``s whose step comes from the step factory (``boost_cells.steps``).

Everything is decided in ``__init__`` (features, parallel mode, target) and built there, every step the cell can
take included: the full step, or with gradient freezing a ``FreezeSwitch`` that selects the scheduled suffix's step
inside the graph. ``construct`` only runs it, so a step means the same however MindSpore calls the cell. The
reference's documented methods and flags are kept for subclasses that write their own ``construct`` (model-zoo
ports of YOLOv5/YOLOv7 add EMA or gradient clipping that way). Host-side features (the first-overflow report) are
host hooks (``boost_cells.host_hooks``).
"""
import warnings

import mindspore as ms
from mindspore import Tensor, nn, ops
from mindspore.common import dtype as mstype

from .auto_boost import AutoBoost
from .config import BoostConfig
from .config_in_force import latest_config
from .diagnostics.overflow_locator import FirstOverflowReporter
from .distributed import parallel_info
from .freezing import FreezeOpt, freeze_optimizer, unfrozen
from .freezing.host.decisions import schedule_decisions
from .freezing.schedule.plan import run_differs
from .host_hooks import HostHooks
from .mindspore_internals import SkipUnchangedCompilePhase
from .run import Run
from .scaling.group_loss_scale import GroupLossScale, GroupLossScaleManager
from .scaling.loss_scale import LossScale, policy_from_config
from .scaling.overflow import make_overflow_detector
from .shared_optimizer import prefix_own_state, share_prefix
from .steps import build_step
from .transforms import apply_less_bn
from .transforms.less_bn import is_less_bn
from .user_warnings import warn_user

__all__ = ["BoostTrainOneStepCell", "BoostTrainOneStepWithLossScaleCell", "build_train_network",
           "make_loss_scale", "resolve_config"]


def resolve_config(boost_config):
    """A ``BoostConfig`` from a train cell's ``boost_config`` argument; None: the latest ``AutoBoost``'s, else O0."""
    return latest_config() if boost_config is None else BoostConfig.coerce(boost_config)


def make_loss_scale(scale_sense, config, weights, info):
    """The loss-scale part for ``scale_sense``: ``GroupLossScale`` for a ``GroupLossScaleManager``, else
    ``LossScale``. The config's ``loss_scale_group`` switch demands a manager (the manager alone is enough)."""
    if isinstance(scale_sense, GroupLossScaleManager):
        return GroupLossScale(scale_sense, weights, info.distributed)
    if config.enabled("loss_scale_group"):
        raise TypeError("For 'BoostTrainOneStepWithLossScaleCell', 'scale_sense' must be a GroupLossScaleManager "
                        f"when 'loss_scale_group' is on, but got {type(scale_sense).__name__}.")
    return LossScale(scale_sense)


def _check_less_bn(name, config, network, given):
    """A train cell trains the network and optimizer it is given, and ``less_bn`` rebuilds both (the LessBN wrapper
    with its head, the optimizer with gradient centralization), so a cell cannot apply it itself. With ``less_bn``
    on and a network not under ``LessBN``: a config given to the cell (``boost_config=``) is refused, naming where
    it applies; the latest ``AutoBoost``'s (the reference's way, whose cells train without it too) gets a warning."""
    if not config.enabled("less_bn") or is_less_bn(network):
        return
    where = ("'less_bn' is on, but the network is not under LessBN, and a train cell trains the network and "
             "optimizer it is given, while LessBN rebuilds both (the head, gradient centralization). It applies "
             "through build_train_network(network, optimizer, config) and boost_cells.Model, or by "
             "AutoBoost(level, config).network_auto_process_train(network, optimizer) before building the cell.")
    if given:
        raise ValueError(f"For '{name}', {where} Or switch it off in the config.")
    warn_user(f"For '{name}', {where} This cell trains without it, as mindspore.boost's does.")


def check_cells(name, network, optimizer):
    """Raise TypeError unless ``network`` is a Cell and ``optimizer`` an optimizer Cell with ``parameters``."""
    if not isinstance(network, nn.Cell):
        raise TypeError(f"For '{name}', 'network' must be a Cell, but got {type(network).__name__}.")
    if not isinstance(optimizer, nn.Cell) or not hasattr(optimizer, "parameters"):
        raise TypeError(f"For '{name}', 'optimizer' must be an optimizer Cell with 'parameters', but got "
                        f"{type(optimizer).__name__}.")


class BoostTrainOneStepCell(HostHooks, SkipUnchangedCompilePhase, nn.TrainOneStepCell):
    """One training step with the features of a boost config; an ``nn.TrainOneStepCell``.

    Drop-in for ``mindspore.boost.BoostTrainOneStepCell``, but it returns the loss (the reference returns None
    when ``sens`` is not given) and never renames the network's parameters.

    Args:
        network (Cell): the network with loss. optimizer (Cell): the optimizer (or a ``FreezeOpt``).
        sens (float): the backward pass's initial gradient; default 1.0.
        boost_config (BoostConfig, dict or str): config, JSON path or a shipped config's name ("O1", as
            ``BoostConfig.from_file``); default: the latest ``AutoBoost``'s config, else level O0.

    Attributes (``nn.TrainOneStepCell``'s, with the reference's meaning, for subclasses):
        network, optimizer, weights, grad (``GradOperation`` with ``sens_param``), sens, reducer_flag,
        grad_reducer (the reduction a subclass applies before the methods below: the world's, the AdaSum group's,
        or an identity stand-alone; a subclass may assign its own, which ``construct`` then applies),
        hyper_map (``ops.HyperMap``).
        freeze (bool): gradient freezing is on (the config's ``grad_freeze``, or a ``FreezeOpt`` optimizer).
        use_grad_accumulation (bool), max_accumulation_step (int): accumulation and its micro-steps.
        enable_adasum, enable_dim_reduce (bool): AdaSum (data-parallel only) and DimReduce are on.
        auto_boost (AutoBoost): the cell's config as an ``AutoBoost`` (``boost_config``, ``grad_accumulation_step``,
            ...), as the reference's cell reads it; built without putting the config in force.
        accumulation_step (int32 Parameter): accumulation's micro-step counter, in ``[0, max_accumulation_step)``,
            0 after an update; without accumulation an int32 0, as the reference's counter stays.
        grad_accumulation (ParameterTuple): accumulation's buffers, the running sum of ``grad / k`` (with
            accumulation only, as in the reference).
        train_strategy (int32 Tensor or None): the freezing sequence, the first trained group of each step (the
            ``FreezeOpt``'s); None without freezing. step (int32 Parameter): the position in it (an int32 0 without
            freezing). Both refuse the automatic schedule, which draws no sequence (the message names what to read).
        freeze_nets (tuple of Cell or None): with freezing, ``freeze_nets[k]`` is one step trained from group ``k``,
            returning the loss (it does not advance the schedule: ``gradient_freeze_process`` does).
        mean, degree: the data-parallel gradient mean and device number (``nn.TrainOneStepCell``'s), None
            stand-alone. sync_tensor: an int32 0 (the reference's AdaSum barrier token; AdaSum here needs none).
        dim_reduce (DimReduce), weights_clone (ParameterTuple): with DimReduce, the update strategy (the reference's
            call ``dim_reduce(loss, grads, sens, weights, weights_clone, *inputs)``) and the clone of the weights it
            keeps equal to them between steps.
        train_step (Cell): the step ``construct`` runs (``boost_cells.steps``), returning ``(outputs, applied)``: a
            ``FreezeSwitch`` (``current_index()`` is the next step's first trained group) when freezing.
        freeze_plan (FreezePlan): what the freezing schedule does over the run (None without freezing);
            ``fit_to_run(run)`` fits it to a run before the first step.
        update (UpdateStrategy): the update strategy of the full step; ``adasum`` its AdaSum part (or None).
        level_route (FrozenLevelRoute): with ``grad_freeze.payback`` (the automatic schedule) or
            ``grad_freeze.cache_frozen_prefix``, the frozen levels' host route, which takes every step while active
            (``boost_cells.host_hooks``): each level's step compiles when first taken, the run's measured costs
            (its ``ledger``, a ``CostLedger``) decide which levels pay; else None. ``prefix_cache``: its cache
            (``hits``, ``misses``, ``seconds`` spent computing prefix outputs), or None. Once groups are frozen for
            good, a call looks its first input up there and trains the suffix on the cached outputs (the cell then
            refuses to be compiled nested, as with any required host hook, unless the route stepped aside:
            ``level_route.step_aside``, as ``Model.train`` does in sink mode). Without the cache, a nested compile
            runs the cell's own step, whose switch compiles the whole front's level with it.

    Inputs: ``*inputs``, the network's inputs.
    Outputs: Tensor, the loss (of this micro-batch when accumulating).

    Raises:
        TypeError: ``network`` or ``optimizer`` is not a Cell. ValueError: invalid config, or a config with
            ``diagnostics.overflow_report`` set (this cell detects no overflow).
    """

    _reports_overflow = False

    def __init__(self, network, optimizer, sens=None, boost_config=None):
        self._init_boost(network, optimizer, sens, boost_config)
        self._build_step()

    def __setattr__(self, name, value):
        """A ``grad_reducer`` assigned once the step is built (a subclass's ``__init__`` assigns its own, as subclasses
        of ``nn.TrainOneStepCell`` do) becomes the full step's cross-rank reduction too
        (``UpdateStrategy.set_grad_reducer``), so the cell's own ``construct`` applies it. Frozen suffix steps keep
        their own reductions over their weights, as the reference's ``gradient_freeze_process`` does."""
        super().__setattr__(name, value)
        if name == "grad_reducer" and getattr(self, "_step_built", False):
            self.update.set_grad_reducer(value)

    def _build_step(self, report=(), **scaling):
        """Everything the cell can run, from the step builder (``boost_cells.steps.build_step``): ``train_step``
        (with the freezing schedule when freezing), the full step's ``update`` and ``grad_reducer``, and the host
        hooks: the frozen levels' route (``level_route``; ``prefix_cache`` is its cache, None without the cache) and
        ``report``; ``scaling`` is a loss-scaled step's ``loss_scale`` and ``overflow_detector``. Then the
        cell's own state is named."""
        built = build_step(self.network, self.optimizer, self.boost_config, self.parallel, who=type(self).__name__,
                           own_construct=type(self).construct is BoostTrainOneStepCell.construct, sens=self.sens,
                           **scaling)
        self.train_step, self.update, self.freeze_nets = built.train_step, built.update, built.freeze_nets
        self.adasum = built.update.adasum_part()
        self.enable_adasum = self.adasum is not None
        self.grad_reducer = built.update.grad_reducer if built.update.grad_reducer is not None else nn.Identity()
        self.level_route = built.level_route
        self.prefix_cache = None if built.level_route is None else built.level_route.cache
        if built.level_route is not None:
            self.route_cells = nn.CellList(built.level_route.cells(), auto_prefix=False)
        self.host_hooks = (() if built.level_route is None else (built.level_route,)) + tuple(report)
        self._assumed_run = self._run_assumption()
        self._less_bn_mode_unchecked = is_less_bn(self.network)
        self._name_own_state()
        self._step_built = True  # a grad_reducer assigned from now on is the full step's (__setattr__)

    def _run_assumption(self):
        """What the first call says when the freezing schedule depends on the run's length but the config left
        ``grad_freeze.total_steps`` out and nothing fitted it (``fit_to_run``): the run length it assumes; else None."""
        plan = self.freeze_plan
        if plan is None or not (plan.run_assumed and plan.depends_on_run):
            return None
        return (f"For '{type(self).__name__}', the freezing schedule ({plan.kind}) assumes a run of "
                f"{plan.total_steps} updates: 'grad_freeze.total_steps' is left out and nothing told the cell its "
                f"run, so it freezes nothing before update {plan.first_frozen_update}. Set 'grad_freeze.total_steps' "
                "to the run's updates, or call fit_to_run(boost_cells.Run(epochs, steps_per_epoch)) before training "
                "(Model.train does both).")

    def _init_boost(self, network, optimizer, sens, boost_config):
        """What both train cells set up before their step: ``nn.TrainOneStepCell``'s attributes and the flags."""
        check_cells(type(self).__name__, network, optimizer)
        config = resolve_config(boost_config)
        _check_less_bn(type(self).__name__, config, network, given=boost_config is not None)
        optimizer = freeze_optimizer(config, network, optimizer)
        nn.TrainOneStepCell.__init__(self, network, optimizer, sens)
        self.boost_config = config
        self.auto_boost = AutoBoost.holding(config)
        if not self.reducer_flag:
            self.mean = self.degree = None
        self.hyper_map = ops.HyperMap()
        self.parallel = parallel_info()
        self.freeze = isinstance(optimizer, FreezeOpt)
        self.max_accumulation_step = config.accumulation_steps
        self.use_grad_accumulation = self.max_accumulation_step > 1
        self.enable_dim_reduce = config.enabled("dim_reduce")
        if not self._reports_overflow and config.section("diagnostics")["overflow_report"] is not None:
            raise ValueError(f"For '{type(self).__name__}', 'diagnostics.overflow_report' must be null: this cell "
                             "detects no overflow, but got a path. Use BoostTrainOneStepWithLossScaleCell (or a config "
                             "with a 'loss_scale' section in build_train_network).")

    def _name_own_state(self):
        """A second train cell on the same optimizer prefixes its own state (``boost_cells.shared_optimizer``)."""
        self.state_prefix = share_prefix(self.optimizer)
        prefix_own_state(self, self.state_prefix, self.network, self.optimizer)

    @property
    def accumulation_step(self):
        """Accumulation's micro-step counter (int32 Parameter); an int32 0 without accumulation."""
        return self.update.accumulation_step if self.use_grad_accumulation else Tensor(0, mstype.int32)

    @property
    def grad_accumulation(self):
        """Accumulation's buffers (ParameterTuple); absent without accumulation, as in the reference (a property's
        AttributeError makes ``nn.Cell`` report the attribute missing)."""
        if not self.use_grad_accumulation:
            raise AttributeError("grad_accumulation")
        return self.update.grad_sums

    def _refuse_without_sequence(self, name):
        """Raise for the reference's attribute ``name`` of a freezing sequence when the schedule is automatic."""
        if self.freeze and self.freeze_plan.kind == "auto":
            raise ValueError(f"For '{type(self).__name__}', '{name}' has no value with the automatic freezing "
                             "schedule, which draws no sequence in advance: read train_step.current_index() (the "
                             "first group the next step trains) or freeze_plan, or set 'grad_freeze.freeze_type' to "
                             "0, 1 or 2 for a sequence.")

    @property
    def train_strategy(self):
        """The freezing sequence (int32 Tensor: the first trained group of each step), the ``FreezeOpt``'s; None
        without freezing."""
        self._refuse_without_sequence("train_strategy")
        return self.optimizer.train_strategy if self.freeze else None

    @property
    def step(self):
        """The position in the freezing sequence (int32 Parameter); an int32 0 without freezing."""
        self._refuse_without_sequence("step")
        return self.train_step.schedule.position if self.freeze else Tensor(0, mstype.int32)

    @property
    def sync_tensor(self):
        """The reference's AdaSum barrier token, which it never changes from 0; AdaSum here needs no barrier."""
        return Tensor(0, mstype.int32)

    @property
    def dim_reduce(self):
        """The DimReduce update strategy; absent without ``dim_reduce``, as in the reference."""
        if not self.enable_dim_reduce:
            raise AttributeError("dim_reduce")
        return self.update

    @property
    def weights_clone(self):
        """DimReduce's clone of the weights, equal to them between steps (with ``dim_reduce`` on only)."""
        return self.dim_reduce.saved

    def check_adasum_enable(self):
        """Whether AdaSum combines the ranks' updates (the config's ``adasum``, data-parallel)."""
        return self.enable_adasum

    def check_dim_reduce_enable(self):
        """Whether DimReduce is the update (the config's ``dim_reduce``)."""
        return self.enable_dim_reduce

    @property
    def freeze_plan(self):
        """The ``FreezePlan`` the freezing schedule follows (``boost_cells.freezing.schedule.plan``); None without
        freezing."""
        return self.train_step.schedule.plan if self.freeze else None

    @property
    def decisions(self):
        """The freezing decisions of the run so far, in update order (a tuple of
        ``boost_cells.freezing.host.decisions.Decision``; ``line()`` reads each as the log showed it): the automatic
        schedule's freezes (from its Parameters), and the host route's payback and cache decisions; () without
        freezing. A checkpoint holds them all, so a resumed run lists what the interrupted one decided."""
        if not self.freeze:
            return ()
        made = list(schedule_decisions(self.train_step.schedule))
        if self.level_route is not None:
            made += self.level_route.log.records
        return tuple(sorted(made, key=lambda decision: decision.update))

    def fit_to_run(self, run):
        """Tell the cell the run it trains in, before its first step (``Model.train`` does, with the run it counts).

        Every part that depends on the run gets this one ``run``: the freezing schedule and the ``FreezeOpt`` follow
        the plan for its updates (``FreezePlan.in_run``: made for them where the config left
        ``grad_freeze.total_steps`` out; a given one, or one an earlier run fitted, stays, with a warning that says
        what it does in this run where the lengths differ); the frozen levels' route and its policy get its calls
        per epoch. The plan's tables are constants of the compiled step.

        Args:
            run (Run): ``boost_cells.Run(epochs, steps_per_epoch)``; epochs None where the loop does not know its
                length (the plan then stays as it is).

        Raises:
            TypeError: ``run`` is not a ``boost_cells.Run``.

        Warns:
            BoostConfigWarning: a given ``grad_freeze.total_steps`` that differs from the run's updates.
        """
        if not isinstance(run, Run):
            raise TypeError(f"For '{type(self).__name__}.fit_to_run', 'run' must be a boost_cells.Run(epochs, "
                            f"steps_per_epoch), but got {type(run).__name__}.")
        updates = run.updates(self.max_accumulation_step)
        if self.freeze and updates is not None:
            plan = self.freeze_plan.in_run(updates)
            if plan is not self.freeze_plan:
                self.train_step.schedule.fit(plan)
                self.optimizer.fit(plan)
            else:
                self._warn_run_differs(plan, run, updates)
            self._assumed_run = None
        if self.level_route is not None:
            self.level_route.fit_to_run(run)

    def _warn_run_differs(self, plan, run, updates):
        """One warning where ``plan`` (kept) was made for another number of updates than ``run`` has."""
        what = run_differs(plan, updates)
        if what is None:
            return
        counted = f"{run.epochs} epochs of {run.steps_per_epoch} steps"
        if self.max_accumulation_step > 1:
            counted += f", {self.max_accumulation_step} micro-steps per update"
        warn_user(f"For '{type(self).__name__}', the freezing schedule was made for 'grad_freeze.total_steps' = "
                  f"{plan.total_steps} updates, but the run has {updates} ({counted}). {what} A left-out "
                  "'grad_freeze.total_steps' is set from the cell's first run (Model.train, fit_to_run); or set it "
                  f"to {updates}.")

    def __call__(self, *inputs):
        if self._assumed_run is not None:
            warn_user(self._assumed_run)
            self._assumed_run = None
        if self._less_bn_mode_unchecked:
            self._less_bn_mode_unchecked = False
            if not self.network.training and ms.get_context("mode") == ms.GRAPH_MODE:
                warn_user(f"For '{type(self).__name__}', the network is under LessBN but in inference mode (a new "
                          "cell's, until set_train()): its BatchNorms normalise with their moving statistics, and "
                          "MindSpore's less_bn pass then fails to compile this step with loss scaling or gradient "
                          "freezing (a TypeError on ZerosLike or Concat). Call set_train() on the train cell before "
                          "its first step, as Model.train does.")
        return super().__call__(*inputs)

    def gradient_freeze_process(self, *inputs):
        """One step over the suffix the freezing schedule selects (inside the graph); the full step when freezing is
        off. Outputs as ``construct``."""
        return self.train_step(*inputs)[0]

    def gradient_accumulation_process(self, loss, grads, sens, *inputs):
        """Accumulate ``grads`` (already reduced by ``grad_reducer``, as in the reference's ``construct``); on the
        cycle's last micro-step apply their mean (through AdaSum when on). ``sens`` is the reference's argument,
        unused; ``inputs`` reach the update strategy (``step_reduced``). Returns ``loss`` depending on it."""
        if not self.use_grad_accumulation:
            raise ValueError(f"For '{type(self).__name__}', 'gradient_accumulation_process' needs gradient "
                             "accumulation on (a config with 'grad_accumulation' and a step count >= 2).")
        return self.update.step_reduced(loss, grads, inputs)[0]

    def adasum_process(self, loss, grads):
        """One optimizer step on ``grads`` (already averaged within the AdaSum group by ``grad_reducer``), then the
        AdaSum combination of the groups' weight deltas. Returns ``loss`` depending on it."""
        if self.adasum is None:
            raise ValueError(f"For '{type(self).__name__}', 'adasum_process' needs AdaSum on (a config with 'adasum' "
                             "in data-parallel training).")
        return self.adasum.step_reduced(loss, grads, ())[0]

    def construct(self, *inputs):
        if not self.host_hooks_ready:  # a constant while compiling (HostHooks)
            raise RuntimeError(self.host_hooks_refusal)
        return self.train_step(*inputs)[0]


class BoostTrainOneStepWithLossScaleCell(BoostTrainOneStepCell):
    """One loss-scaled training step; a step with non-finite gradients updates nothing.

    Runs on CPU, GPU and Ascend (the reference and ``nn.TrainOneStepWithLossScaleCell`` use an Ascend-only op on
    CPU). The backward pass starts from ``loss_scale``; gradients are unscaled, checked for overflow (float-status
    register on Ascend saturation mode, a fused finiteness check elsewhere; all-reduced across ranks), the policy
    updates the scale, and only a clean step reaches the update strategy.

    Args:
        network (Cell), optimizer (Cell): as ``BoostTrainOneStepCell``.
        scale_sense (Cell or Tensor): a loss-scale update cell (``nn.DynamicLossScaleUpdateCell``,
            ``nn.FixedLossScaleUpdateCell``, ``DynamicLossScaleUpdate``), a fixed scale Tensor of shape () or (1,),
            or a ``GroupLossScaleManager`` (a scale per parameter group; required when ``loss_scale_group`` is on).
        boost_config: as ``BoostTrainOneStepCell``.
        overflow_detector (Cell): overrides the target's detector (see ``boost_cells.scaling.overflow``).
        overflow_report (str): on the first overflowing step, write an overflow report (``boost_cells.diagnostics``)
            for that batch and scale to this path and go on training; overrides the config's
            ``diagnostics.overflow_report``. A host hook: the cell then refuses to be compiled nested in another
            Cell's graph (dataset sink mode). Off (default): nothing runs on the host.

    Attributes (the reference's, for subclasses): ``scale_sense`` (the scale Parameter), ``loss_scaling_manager``
    (the update cell, or None for a fixed Tensor scale), ``enable_enhanced_amp`` (bool: a ``GroupLossScaleManager``
    scales the groups), ``loss_scale_groups`` (its groups; with it only), ``gpu_target`` (bool: the device target is
    GPU), ``is_distributed`` (bool: data-parallel), and the methods ``_set_sense_scale`` (``set_sense_scale``),
    ``_start_overflow_check``, ``_get_overflow_status``, ``_process_loss_scale``; ``loss_scale`` (the loss-scale
    part) and ``overflow_detector``.

    Parameters (state, checkpointed):
        scale_sense (float32): the current loss scale (with a ``GroupLossScaleManager``, a constant 1 Tensor: the
            manager holds the group scales, see ``GroupLossScale``).
        A second train cell on the same optimizer prefixes its own state with ``share1.`` (see
        ``boost_cells.shared_optimizer``); the network's and the optimizer's names never change.

    Inputs: ``*inputs``, the network's inputs.
    Outputs: ``(loss, overflow, loss_scale)``: the loss, a bool scalar (identical on every rank), and a copy of
    the scale after this step's policy update (the scale the next step uses), as ``nn`` cells report it (the
    first group's with a ``GroupLossScaleManager``, as the reference).

    Raises:
        TypeError: ``scale_sense`` is neither an update cell nor a Tensor, or not a ``GroupLossScaleManager`` with
        ``loss_scale_group`` on. ValueError: a Tensor ``scale_sense`` of shape other than () or (1,), an invalid
        config, or manager groups that miss an optimizer parameter.
    """

    _reports_overflow = True

    def __init__(self, network, optimizer, scale_sense, boost_config=None, *, overflow_detector=None,
                 overflow_report=None):
        self._init_boost(network, optimizer, None, boost_config)
        self.loss_scale = make_loss_scale(scale_sense, self.boost_config, self.weights, self.parallel)
        self.scale_sense = self.loss_scale.scale_sense
        self.loss_scaling_manager = scale_sense if isinstance(scale_sense, nn.Cell) else None
        self.enable_enhanced_amp = isinstance(scale_sense, GroupLossScaleManager)
        if self.enable_enhanced_amp:
            self.loss_scale_groups = scale_sense.loss_scale_groups
        self.gpu_target = ms.get_context("device_target") == "GPU"
        self.is_distributed = self.parallel.distributed
        self.overflow_detector = overflow_detector if overflow_detector is not None \
            else make_overflow_detector(self.parallel.distributed)
        report_path = overflow_report if overflow_report is not None \
            else self.boost_config.section("diagnostics")["overflow_report"]
        report = () if report_path is None else (FirstOverflowReporter(report_path),)
        self._build_step(report, loss_scale=self.loss_scale, overflow_detector=self.overflow_detector)

    def set_sense_scale(self, sens):
        """Set the loss scale to ``sens`` (Tensor of shape () or (1,), a finite float32 > 0); with a
        ``GroupLossScaleManager``, every group's scale."""
        self.loss_scale.set_scale(sens)

    def _set_sense_scale(self, sens):
        """The reference's name of ``set_sense_scale``."""
        self.set_sense_scale(sens)

    def _start_overflow_check(self, pre_cond, compute_input):
        """The reference's: start an overflow window after ``pre_cond`` (the loss); returns ``(status,
        compute_input)``, the backward pass to consume the returned ``compute_input`` (its sens)."""
        return self.overflow_detector.start(pre_cond, compute_input)

    def _get_overflow_status(self, status, compute_output):
        """The reference's: the overflow flag of the window ``status`` over ``compute_output`` (the gradients),
        identical on every rank."""
        return self.overflow_detector(status, compute_output)

    def _process_loss_scale(self, overflow):
        """The reference's: run the loss-scale policy on ``overflow`` (updates ``scale_sense``); returns the flag
        that decides the skip. (A ``GroupLossScaleManager`` needs the gradients to flag its groups: subclasses using
        one call ``self.loss_scale(overflow, grads)``.)"""
        return self.loss_scale(overflow, ())[0]


def build_train_network(network_with_loss, optimizer, config, loss_scale_manager=None):
    """The train cell a config asks for.

    A ``loss_scale_manager`` (MindSpore's ``DynamicLossScaleManager``/``FixedLossScaleManager``) or the config's
    ``"loss_scale"`` section gives a ``BoostTrainOneStepWithLossScaleCell`` (the manager wins when both are
    given); otherwise a ``BoostTrainOneStepCell``. ``FixedLossScaleManager(scale, drop_overflow_update=False)``
    gives, as in MindSpore, a ``BoostTrainOneStepCell`` whose backward pass starts from ``sens=scale`` with no
    overflow check and no skipped step: the optimizer is expected to divide the scale out (its ``loss_scale``).
    The config's network/optimizer transforms come first (``less_bn``: ``LessBN`` and a rebuilt optimizer, as
    ``AutoBoost.network_auto_process_train``; a network already under ``LessBN`` is taken as transformed); the
    cell trains the transformed pair.
    A ``GroupLossScaleManager`` gives group loss scaling; the config's ``loss_scale_group`` switch requires one.

    Raises:
        ValueError: ``loss_scale_group`` on without a ``GroupLossScaleManager``.

    Warns:
        UserWarning: with ``drop_overflow_update=False``, when the optimizer's ``loss_scale`` differs from the
            manager's scale, so every update is off by their ratio.
    """
    config = BoostConfig.coerce(config, arg="config")
    if config.enabled("loss_scale_group") and not isinstance(loss_scale_manager, GroupLossScaleManager):
        raise ValueError("For 'build_train_network', 'loss_scale_group' is on, so 'loss_scale_manager' must be a "
                         f"GroupLossScaleManager, but got {type(loss_scale_manager).__name__}.")
    network_with_loss, optimizer = apply_less_bn(network_with_loss, optimizer, config)
    if loss_scale_manager is not None:
        policy = loss_scale_manager.get_update_cell()
        if policy is None:
            return _scaled_without_skipping(network_with_loss, optimizer, config, loss_scale_manager.get_loss_scale())
        return BoostTrainOneStepWithLossScaleCell(network_with_loss, optimizer, policy, boost_config=config)
    if config.loss_scale is not None:
        return BoostTrainOneStepWithLossScaleCell(network_with_loss, optimizer, policy_from_config(config.loss_scale),
                                                  boost_config=config)
    return BoostTrainOneStepCell(network_with_loss, optimizer, boost_config=config)


def _scaled_without_skipping(network_with_loss, optimizer, config, scale):
    """A ``FixedLossScaleManager(scale, drop_overflow_update=False)`` step: ``sens=scale``, nothing skipped."""
    optimizer_scale = getattr(unfrozen(optimizer), "loss_scale", 1.0)  # a FreezeOpt's: its optimizer's
    if optimizer_scale != scale:
        warnings.warn(f"For 'build_train_network', FixedLossScaleManager(drop_overflow_update=False) scales the "
                      f"gradients by {scale} but the optimizer's loss_scale is {optimizer_scale}, so every update is "
                      f"off by a factor {scale / optimizer_scale:g}; build the optimizer with loss_scale={scale}.",
                      UserWarning, stacklevel=3)
    return BoostTrainOneStepCell(network_with_loss, optimizer, sens=scale, boost_config=config)
