"""The train cells: thin compositions of value-and-grad, overflow check, loss-scale policy and update strategy.

Everything is decided in ``__init__`` (features, parallel mode, target); ``construct`` only composes. New
strategies slot into ``make_update_strategy`` (other update rules: DimReduce) or beside the gradient computation
(gradient freezing: which parameters get gradients on a step); loss scaling is one part, ``LossScale`` or
``GroupLossScale`` (a scale per parameter group), chosen by ``make_loss_scale``. Gradient freezing picks, on the
host before each step, the twin of the cell that differentiates only the scheduled suffix
(``transforms.freeze.FreezeSchedule``).
"""
import warnings

from mindspore import nn, ops

from .config import latest_config
from .config import BoostConfig
from .diagnostics.overflow_locator import FirstOverflowReporter
from .distributed import make_grad_reducer, parallel_info
from .scaling.group_loss_scale import GroupLossScale, GroupLossScaleManager
from .scaling.loss_scale import LossScale, policy_from_config
from .scaling.overflow import make_overflow_detector
from .shared_optimizer import prefix_own_state, share_prefix
from .transforms import apply_less_bn
from .transforms.freeze import FreezeOpt, FreezeSchedule, freeze_optimizer, unfrozen
from .updates import AdaSumUpdate, ApplyGradients, GradientAccumulation, make_dim_reduce

__all__ = ["BoostTrainOneStepCell", "BoostTrainOneStepWithLossScaleCell", "build_train_network",
           "make_loss_scale", "make_update_strategy"]


def _resolve_config(boost_config):
    return latest_config() if boost_config is None else BoostConfig.coerce(boost_config)


def make_update_strategy(config, optimizer, info, network=None):
    """The update strategy a config asks for: DimReduce (which re-runs ``network``, the network with loss), AdaSum
    or a plain reduced step, under accumulation if enabled.

    Stand-alone, AdaSum has one group, and the AdaSum of one group's weight delta is that delta: the plain step.
    So level O2 trains stand-alone, as the reference's does."""
    if config.enabled("dim_reduce"):
        return make_dim_reduce(config.section("dim_reduce"), network, optimizer, info)
    if config.enabled("adasum") and info.distributed:
        apply = AdaSumUpdate(optimizer, info, config.section("common")["device_number"])
    else:
        apply = ApplyGradients(optimizer, make_grad_reducer(optimizer.parameters, info))
    if config.accumulation_steps > 1:
        return GradientAccumulation(config.accumulation_steps, optimizer, apply)
    return apply


def make_loss_scale(scale_sense, config, weights, info):
    """The loss-scale part for ``scale_sense``: ``GroupLossScale`` for a ``GroupLossScaleManager``, else
    ``LossScale``. The config's ``loss_scale_group`` switch demands a manager (the manager alone is enough)."""
    if isinstance(scale_sense, GroupLossScaleManager):
        return GroupLossScale(scale_sense, weights, info.distributed)
    if config.enabled("loss_scale_group"):
        raise TypeError("For 'BoostTrainOneStepWithLossScaleCell', 'scale_sense' must be a GroupLossScaleManager "
                        f"when 'loss_scale_group' is on, but got {type(scale_sense).__name__}.")
    return LossScale(scale_sense)


def _check_cells(name, network, optimizer):
    if not isinstance(network, nn.Cell):
        raise TypeError(f"For '{name}', 'network' must be a Cell, but got {type(network).__name__}.")
    if not isinstance(optimizer, nn.Cell) or not hasattr(optimizer, "parameters"):
        raise TypeError(f"For '{name}', 'optimizer' must be an optimizer Cell with 'parameters', but got "
                        f"{type(optimizer).__name__}.")


class _PhaseCachingCell(nn.Cell):
    """A Cell whose ``compile_phase`` setter skips the sub-cell walk when the phase is unchanged.

    In GRAPH_MODE, every call sets ``compile_phase`` and ``nn.Cell`` pushes it down the whole sub-cell tree
    (~11 us per cell on CPU: 125 us of a 2 ms MLP step), then looks the phase up in its compile cache. An unchanged
    phase always means a cache hit, so no compile ever follows a skipped walk; a new phase (new input shapes,
    say) still walks the tree before compiling.
    """

    @property
    def compile_phase(self):
        return self._compile_phase

    @compile_phase.setter
    def compile_phase(self, value):
        if value != self._compile_phase:
            nn.Cell.compile_phase.fset(self, value)


class BoostTrainOneStepCell(_PhaseCachingCell):
    """One training step with the features of a boost config.

    Drop-in for ``mindspore.boost.BoostTrainOneStepCell``, but it returns the loss (the reference returns None
    when ``sens`` is not given) and never renames the network's parameters.

    Args:
        network (Cell): the network with loss. optimizer (Cell): the optimizer.
        sens (float): the backward pass's initial gradient; default 1.0.
        boost_config (BoostConfig, dict or str): config or JSON path; default: the latest ``AutoBoost``'s
            config, else level O0.

    Gradient freezing is on when the config's ``grad_freeze`` is or ``optimizer`` is a ``FreezeOpt``: then
    ``freeze`` (a ``FreezeSchedule``, Parameter ``grad_freeze.position``) runs each step, on the host, as this
    cell (index 0) or a twin over the scheduled suffix; ``freeze.current_index()`` is the next step's index.

    Inputs: ``*inputs``, the network's inputs.
    Outputs: Tensor, the loss (of this micro-batch when accumulating).

    Raises:
        TypeError: ``network`` or ``optimizer`` is not a Cell. ValueError: invalid config, or a config with
            ``diagnostics.overflow_report`` set (this cell detects no overflow).
    """

    _reports_overflow = False

    def __init__(self, network, optimizer, sens=None, boost_config=None):
        super().__init__(auto_prefix=False)
        _check_cells(type(self).__name__, network, optimizer)
        self.boost_config = _resolve_config(boost_config)
        optimizer = freeze_optimizer(self.boost_config, network, optimizer)
        self.network = network
        self.network.set_grad()
        self.optimizer = optimizer
        self.weights = optimizer.parameters
        self.sens = 1.0 if sens is None else sens
        self.grad = ops.GradOperation(get_by_list=True, sens_param=True)
        self.parallel = parallel_info()
        self.update = make_update_strategy(self.boost_config, unfrozen(optimizer), self.parallel, network)
        self.update_takes_inputs = getattr(self.update, "takes_inputs", False)
        self.freeze = FreezeSchedule(optimizer) if isinstance(optimizer, FreezeOpt) else None
        if not self._reports_overflow and self.boost_config.section("diagnostics")["overflow_report"] is not None:
            raise ValueError(f"For '{type(self).__name__}', 'diagnostics.overflow_report' must be null: this cell "
                             "detects no overflow, but got a path. Use BoostTrainOneStepWithLossScaleCell (or a config "
                             "with a 'loss_scale' section in build_train_network).")
        self.state_prefix = share_prefix(optimizer, self)
        prefix_own_state(self, self.state_prefix, network, optimizer)

    def _suffix_step(self, optimizer):
        """This cell's step over ``optimizer``'s parameters only (gradient freezing's frozen steps)."""
        return BoostTrainOneStepCell(self.network, optimizer, self.sens, boost_config=self._suffix_config())

    def _suffix_config(self):
        raw = self.boost_config.to_dict()
        raw["boost"].update(mode="manual", grad_freeze=False)
        raw["diagnostics"]["overflow_report"] = None  # this cell's reporter covers its suffix steps
        return raw

    def __call__(self, *inputs):
        if self.freeze is None:
            return super().__call__(*inputs)
        return self.freeze.run(self, super().__call__, self._suffix_step, *inputs)

    def _update(self, loss, grads, inputs):
        """The update strategy's step; a strategy with ``takes_inputs`` (DimReduce) also gets the step's inputs."""
        if self.update_takes_inputs:
            return self.update(loss, grads, *inputs)
        return self.update(loss, grads)

    def construct(self, *inputs):
        loss = self.network(*inputs)
        sens = ops.fill(loss.dtype, loss.shape, self.sens)
        grads = self.grad(self.network, self.weights)(*inputs, sens)
        return self._update(loss, grads, inputs)


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
        overflow_detector (Cell): overrides the target's detector (see ``boost_cells.overflow``).
        overflow_report (str): on the first overflowing step, write an overflow report (``boost_cells.diagnostics``)
            for that batch and scale to this path and go on training; overrides the config's
            ``diagnostics.overflow_report``. Off (default): ``__call__`` is the plain step.

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
        super().__init__(network, optimizer, sens=None, boost_config=boost_config)
        self.loss_scale = make_loss_scale(scale_sense, self.boost_config, self.weights, self.parallel)
        # What a freezing twin's loss-scale part is built from (its state is then swapped for this cell's); in a
        # tuple, so it stays host-side instead of becoming a second path to a sub-cell.
        self._twin_scale_sense = (scale_sense,)
        self.scale_sense = self.loss_scale.scale_sense
        self.overflow_detector = overflow_detector if overflow_detector is not None \
            else make_overflow_detector(self.parallel.distributed)
        report_path = overflow_report if overflow_report is not None \
            else self.boost_config.section("diagnostics")["overflow_report"]
        self.overflow_reporter = None if report_path is None else FirstOverflowReporter(report_path)
        prefix_own_state(self, self.state_prefix, network, optimizer)

    def __call__(self, *inputs):
        if self.overflow_reporter is None:
            return super().__call__(*inputs)
        return self.overflow_reporter.step(self, super().__call__, inputs)

    def _suffix_step(self, optimizer):
        return BoostTrainOneStepWithLossScaleCell(self.network, optimizer, self._twin_scale_sense[0],
                                                  boost_config=self._suffix_config(),
                                                  overflow_detector=self.overflow_detector)

    def set_sense_scale(self, sens):
        """Set the loss scale to ``sens`` (Tensor of shape () or (1,), a finite float32 > 0); with a
        ``GroupLossScaleManager``, every group's scale."""
        self.loss_scale.set_scale(sens)

    def scaled_gradients(self, scale, inputs):
        """One overflow window: the loss, the gradients of the backward pass started from ``scale`` (float32
        scalar Tensor) and unscaled by the loss-scale part, and the detector's overflow flag (computed last).
        ``inputs`` is the tuple of network inputs."""
        loss = self.network(*inputs)
        status, sens = self.overflow_detector.start(loss, ops.ones_like(loss) * ops.cast(scale, loss.dtype))
        grads = self.grad(self.network, self.weights)(*inputs, sens)
        grads = self.loss_scale.unscale(scale, grads)
        return loss, grads, self.overflow_detector(status, grads)

    def construct(self, *inputs):
        loss, grads, overflow = self.scaled_gradients(self.loss_scale.value(), inputs)
        overflow, new_scale = self.loss_scale(overflow, grads)
        if not overflow:
            self._update(loss, grads, inputs)
        return loss, overflow, new_scale


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
    config = BoostConfig.coerce(config)
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
    optimizer_scale = getattr(optimizer, "loss_scale", 1.0)
    if optimizer_scale != scale:
        warnings.warn(f"For 'build_train_network', FixedLossScaleManager(drop_overflow_update=False) scales the "
                      f"gradients by {scale} but the optimizer's loss_scale is {optimizer_scale}, so every update is "
                      f"off by a factor {scale / optimizer_scale:g}; build the optimizer with loss_scale={scale}.",
                      UserWarning, stacklevel=3)
    return BoostTrainOneStepCell(network_with_loss, optimizer, sens=scale, boost_config=config)
