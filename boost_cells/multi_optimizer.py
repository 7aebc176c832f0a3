"""Several (network with loss, optimizer) pairs in one loss-scaled step, each in its own overflow window (GANs).

Each pair is a ``BoostTrainOneStepWithLossScaleCell`` (its gradients, overflow detector, loss-scale policy and
update strategy, accumulation included); this cell only orders the pairs' windows and decides who updates.
"""
import os

from mindspore import nn, ops

from .scaling.group_loss_scale import GroupLossScaleManager
from .train_cells import BoostTrainOneStepWithLossScaleCell, _check_cells, _PhaseCachingCell, _resolve_config

__all__ = ["MultiOptimizerTrainOneStepCell"]

_NAME = "MultiOptimizerTrainOneStepCell"


def _check_pairs(pairs):
    if not isinstance(pairs, (list, tuple)) or not pairs:
        raise TypeError(f"For '{_NAME}', 'pairs' must be a non-empty list of (network_with_loss, optimizer), but "
                        f"got {pairs!r}.")
    for index, pair in enumerate(pairs):
        if not isinstance(pair, (list, tuple)) or len(pair) != 2:
            raise TypeError(f"For '{_NAME}', 'pairs[{index}]' must be a (network_with_loss, optimizer) pair, but "
                            f"got {pair!r}.")
        _check_cells(_NAME, *pair)
    return [tuple(pair) for pair in pairs]


def _per_pair(arg, value, count):
    """``value`` as a list of ``count`` entries: a list is checked for its length, anything else is shared."""
    if value is None:
        return [None] * count
    if isinstance(value, (list, tuple)):
        if len(value) != count:
            raise ValueError(f"For '{_NAME}', '{arg}' must have one entry per pair ({count}), but got "
                             f"{len(value)}.")
        return list(value)
    return [value] * count


def _check_weight_names(steps):
    """Distinct network weights must have distinct names, else MindSpore renames every parameter on first call."""
    owner = {}
    for index, step in enumerate(steps):
        for weight in step.network.get_parameters():
            other = owner.setdefault(weight.name, (index, weight))
            if other[1] is not weight:
                raise ValueError(f"For '{_NAME}', the networks hold two different parameters named "
                                 f"'{weight.name}' (in pairs {other[0]} and {index}); MindSpore would rename every "
                                 "parameter of the cell. Give the networks' parameters distinct names.")


def _name_state_apart(steps):
    """Prefix ``pair<i>.`` to each Parameter pair ``i`` owns (optimizer, policy, accumulation, loss scale) whose
    name another pair's state also uses (two optimizers' ``global_step``, two policies' counters).

    A Parameter that pairs share (one shared scale and policy) is one object and keeps its name; network weights
    are never renamed.
    """
    weights = {id(w) for step in steps for w in step.network.get_parameters()}
    owned = {}
    for index, step in enumerate(steps):
        for param in step.get_parameters():
            if id(param) not in weights:
                owned.setdefault(id(param), (index, param))
    names = [param.name for _, param in owned.values()]
    for index, param in owned.values():
        if names.count(param.name) > 1:
            param.name = f"pair{index}.{param.name}"


def _pair_report_paths(path, count):
    """``<stem>.pair<i><ext>`` per pair for an overflow-report path, or None each when reporting is off."""
    if path is None:
        return [None] * count
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"For '{_NAME}', 'overflow_report' must be a path string, but got {type(path).__name__}.")
    stem, ext = os.path.splitext(os.fspath(path))
    return [f"{stem}.pair{index}{ext}" for index in range(count)]


def _any(flags):
    overflow = flags[0]
    for flag in flags[1:]:
        overflow = ops.logical_or(overflow, flag)
    return overflow


class MultiOptimizerTrainOneStepCell(_PhaseCachingCell):
    """One loss-scaled step over several (network with loss, optimizer) pairs, e.g. a GAN's discriminator and
    generator, each pair in its own overflow window.

    Pairs run in list order, as consecutive train-cell calls would: pair ``i + 1``'s forward pass starts after
    pair ``i``'s overflow read (a ``depend`` edge on its inputs), so on Ascend the float-status windows
    ``clear, loss, grads, read`` never interleave, and (default mode) it sees pair ``i``'s updated weights.
    Each flag is all-reduced in data-parallel mode; off Ascend each pair uses the fused finiteness check.

    - ``shared_overflow=False`` (default): each optimizer skips on its own overflow. Per-pair scales move with
      their own pair's overflow; a single shared scale is moved once per step by its policy, lowered when any pair
      overflowed (as PyTorch's ``GradScaler``).
    - ``shared_overflow=True``: one decision, every optimizer updates or none does (none when any pair's flag is
      set). Deciding needs every flag before any update, so every pair's gradients are taken at the weights the
      step started with; the clean updates then follow in list order. Every policy sees the shared decision.

    With gradient accumulation in the config, each pair accumulates on its own (skipped micro-steps never reach
    its buffer). Network parameters keep their names; state that pairs own under the same name is prefixed
    ``pair<i>.`` (see Parameters).

    Args:
        pairs (list): ``(network_with_loss, optimizer)`` tuples; every network receives the same ``*inputs``.
        scale_sense (Cell, Tensor or list): a loss-scale update cell or fixed scale Tensor (as
            ``BoostTrainOneStepWithLossScaleCell``) shared by all pairs, or a list with one per pair.
        shared_overflow (bool): one skip decision for all pairs; default False.
        boost_config (BoostConfig, dict or str): as ``BoostTrainOneStepCell``; applies to every pair.
        overflow_detectors (list of Cell): one detector per pair, overriding the target's (tests pass recording
            stand-ins for the NPU float-status ops).
        overflow_report (str): on each pair's first overflowing step, write an overflow report of its network
            (``boost_cells.diagnostics``) for that batch and scale to ``<stem>.pair<i><ext>`` and go on training;
            overrides the config's ``diagnostics.overflow_report``. Off (default): ``__call__`` is the plain step.

    Parameters (state, checkpointed):
        scale_sense (float32): the shared loss scale; with a list, ``pair<i>.scale_sense`` per pair.
        pair<i>.<name>: state of pair ``i``'s optimizer, policy or accumulation whose name another pair's state
            also has (``pair0.global_step``, ``pair1.beta1_power``, ``pair1.grad_accumulation.accumulation_step``,
            ...); names used by one pair only are kept.

    Inputs: ``*inputs``, passed to every network.
    Outputs: ``(losses, overflows, scales)``, tuples with one entry per pair: the loss, the pair's own overflow
    flag (bool scalar, identical on every rank), and the pair's scale after this step's policy update.

    Raises:
        TypeError: ``pairs`` is not a non-empty list of pairs, a network or optimizer is not a Cell,
            ``shared_overflow`` is not a bool, a ``scale_sense`` is neither an update cell nor a Tensor, or
            ``overflow_report`` is not a path.
        ValueError: a list ``scale_sense`` or ``overflow_detectors`` of the wrong length, two networks' distinct
            parameters share a name, or an invalid config.
    """

    def __init__(self, pairs, scale_sense, shared_overflow=False, boost_config=None, *, overflow_detectors=None,
                 overflow_report=None):
        super().__init__(auto_prefix=False)
        pairs = _check_pairs(pairs)
        if not isinstance(shared_overflow, bool):
            raise TypeError(f"For '{_NAME}', 'shared_overflow' must be a bool, but got {shared_overflow!r}.")
        senses = _per_pair("scale_sense", scale_sense, len(pairs))
        if any(isinstance(sense, GroupLossScaleManager) for sense in senses):
            raise TypeError(f"For '{_NAME}', 'scale_sense' must be loss-scale update cells or Tensors; a "
                            "GroupLossScaleManager scales one network's layer groups: use it with "
                            "BoostTrainOneStepWithLossScaleCell.")
        if overflow_detectors is not None and not isinstance(overflow_detectors, (list, tuple)):
            raise TypeError(f"For '{_NAME}', 'overflow_detectors' must be a list with one detector per pair, but "
                            f"got {type(overflow_detectors).__name__}.")
        detectors = _per_pair("overflow_detectors", overflow_detectors, len(pairs))
        config = _resolve_config(boost_config)
        report = overflow_report if overflow_report is not None else config.section("diagnostics")["overflow_report"]
        reports = _pair_report_paths(report, len(pairs))
        steps = [BoostTrainOneStepWithLossScaleCell(network, optimizer, sense, config, overflow_detector=detector,
                                                    overflow_report=path)
                 for (network, optimizer), sense, detector, path in zip(pairs, senses, detectors, reports)]
        self.shared_scale = not isinstance(scale_sense, (list, tuple))
        if self.shared_scale:
            for step in steps[1:]:
                step.loss_scale = steps[0].loss_scale
                step.scale_sense = steps[0].scale_sense
        _check_weight_names(steps)
        _name_state_apart(steps)
        # auto_prefix=False: a prefixing CellList (slices of one included) renames every parameter it holds.
        self.steps = nn.CellList(steps, auto_prefix=False)
        self.shared_overflow = shared_overflow
        self.count = len(pairs)
        self.reporting = report is not None

    def __call__(self, *inputs):
        if not self.reporting:
            return super().__call__(*inputs)
        for step in self.steps:
            step.overflow_reporter.before_step(step)
        outputs = super().__call__(*inputs)
        for step, overflow in zip(self.steps, outputs[1]):
            step.overflow_reporter.after_step(step, inputs, overflow)
        return outputs

    def construct(self, *inputs):
        losses, flags, grads = (), (), ()
        for index in range(self.count):
            step = self.steps[index]
            loss, step_grads, overflow = step.scaled_gradients(step.loss_scale.value(), inputs)
            if self.shared_overflow:
                grads += (step_grads,)
            elif not overflow:
                step.update(loss, step_grads)
            inputs = tuple([ops.depend(value, overflow) for value in inputs])
            losses += (loss,)
            flags += (overflow,)
        decisions = flags
        if self.shared_overflow:
            overflow = _any(flags)
            for index in range(self.count):
                step = self.steps[index]
                if not overflow:
                    step.update(losses[index], grads[index])
            decisions = (overflow,) * self.count
        return losses, flags, self._move_scales(decisions)

    def _move_scales(self, flags):
        """Run the policies (one per scale) on the skip decisions; the scales after the update, one per pair."""
        if self.shared_scale:
            _, scale = self.steps[0].loss_scale(_any(flags), ())
            return (scale,) * self.count
        scales = ()
        for index in range(self.count):
            _, scale = self.steps[index].loss_scale(flags[index], ())
            scales += (scale,)
        return scales
