"""Several (network with loss, optimizer) pairs in one loss-scaled step, each in its own overflow window (GANs).

Each pair's step comes from the step factory (``boost_cells.steps``), as a train cell's does: its gradients,
overflow detector, loss-scale part and update strategy (accumulation and gradient freezing included, per pair);
this cell only orders the pairs' windows and, where the pairs share a scale or a decision, moves the scale.
"""
import os
from types import MappingProxyType, SimpleNamespace

from mindspore import nn, ops

from .distributed import parallel_info
from .diagnostics.overflow_locator import FirstOverflowReporter
from .host_hooks import HostHooks
from .scaling.group_loss_scale import GroupLossScaleManager
from .scaling.loss_scale import HeldLossScale, LossScale
from .scaling.overflow import make_overflow_detector
from .steps import build_step
from .mindspore_internals import SkipUnchangedCompilePhase
from .rules import check
from .user_warnings import warn_user
from .train_cells import check_cells, resolve_config
from .freezing import freeze_optimizer

__all__ = ["MultiOptimizerTrainOneStepCell"]

_NAME = "MultiOptimizerTrainOneStepCell"

# Features a config may switch on that do not apply per pair, and why.
_REFUSED = MappingProxyType({
    "less_bn": "it transforms one classifier's network and optimizer (LessBN, FN head); apply LessBN to a pair's "
               "network yourself, or switch 'less_bn' off ('boost': {'mode': 'manual', 'less_bn': false})",
    "dim_reduce": "its PCA matrix describes one network's weights",
    "loss_scale_group": "a GroupLossScaleManager scales one network's layer groups: use it with "
                        "BoostTrainOneStepWithLossScaleCell",
})


def _check_pairs(pairs):
    if not isinstance(pairs, (list, tuple)) or not pairs:
        raise TypeError(f"For '{_NAME}', 'pairs' must be a non-empty list of (network_with_loss, optimizer), but "
                        f"got {pairs!r}.")
    for index, pair in enumerate(pairs):
        if not isinstance(pair, (list, tuple)) or len(pair) != 2:
            raise TypeError(f"For '{_NAME}', 'pairs[{index}]' must be a (network_with_loss, optimizer) pair, but "
                            f"got {pair!r}.")
        check_cells(_NAME, *pair)
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


def _check_weight_names(networks):
    """Distinct network weights must have distinct names, else MindSpore renames every parameter on first call."""
    owner = {}
    for index, network in enumerate(networks):
        for weight in network.get_parameters():
            other = owner.setdefault(weight.name, (index, weight))
            if other[1] is not weight:
                raise ValueError(f"For '{_NAME}', the networks hold two different parameters named "
                                 f"'{weight.name}' (in pairs {other[0]} and {index}); MindSpore would rename every "
                                 "parameter of the cell. Give the networks' parameters distinct names.")


def _name_state_apart(steps, weights):
    """Prefix ``pair<i>.`` to each state Parameter of pair ``i``'s step (its optimizer's, its policy's, its
    accumulation's, its freezing position) whose name another pair's state also uses (two optimizers'
    ``global_step``, two policies' counters), once, before anything is compiled. A Parameter that pairs share (one
    shared scale and policy) is one object and keeps its name; network weights (``weights``, ids) never change."""
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


def _check_features(config, shared_overflow):
    """Refuse, naming the feature, what a config switches on that cannot apply per pair."""
    for feature, why in _REFUSED.items():
        if config.enabled(feature):
            raise ValueError(f"For '{_NAME}', the config switches on '{feature}', which cannot apply per pair: {why}.")
    if shared_overflow and config.enabled("grad_freeze"):
        raise ValueError(f"For '{_NAME}', the config switches on 'grad_freeze', which cannot apply with "
                         "shared_overflow=True: the shared decision needs every pair's gradients before any update, "
                         "and each frozen step is selected inside the graph as a whole. Use shared_overflow=False.")
    if config.enabled("grad_freeze") and config.section("grad_freeze")["cache_frozen_prefix"] is True:
        warn_user(f"For '{_NAME}', 'grad_freeze.cache_frozen_prefix' is left out: the cache takes one network's frozen "
                  "steps on the host, but this cell's step runs every pair in one graph. Each pair freezes without "
                  "the cache; set the key to false to silence this.")


def _any(flags):
    overflow = flags[0]
    for flag in flags[1:]:
        overflow = ops.logical_or(overflow, flag)
    return overflow


class MultiOptimizerTrainOneStepCell(HostHooks, SkipUnchangedCompilePhase, nn.Cell):
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

    The config applies per pair: gradient accumulation (skipped micro-steps never reach a pair's buffer) and
    gradient freezing (each pair's optimizer frozen by its own network's groups and schedule, selected in the graph;
    with ``shared_overflow=False`` only, since a shared decision must see every pair's gradients before any
    update) and AdaSum. ``less_bn``, ``dim_reduce`` and ``loss_scale_group`` are refused at construction, naming
    the feature. Network parameters keep their names; state that pairs own under the same name is prefixed
    ``pair<i>.`` at construction, before any step is built (see Parameters).

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
            overrides the config's ``diagnostics.overflow_report``. A host hook (``boost_cells.host_hooks``).

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
            parameters share a name, an invalid config, or a config feature that cannot apply per pair.
    """

    def __init__(self, pairs, scale_sense, shared_overflow=False, boost_config=None, *, overflow_detectors=None,
                 overflow_report=None):
        super().__init__(auto_prefix=False)
        pairs = _check_pairs(pairs)
        check(_NAME, "shared_overflow", shared_overflow)
        senses = _per_pair("scale_sense", scale_sense, len(pairs))
        if any(isinstance(sense, GroupLossScaleManager) for sense in senses):
            raise TypeError(f"For '{_NAME}', 'scale_sense' must be loss-scale update cells or Tensors; a "
                            "GroupLossScaleManager scales one network's layer groups: use it with "
                            "BoostTrainOneStepWithLossScaleCell.")
        if overflow_detectors is not None and not isinstance(overflow_detectors, (list, tuple)):
            raise TypeError(f"For '{_NAME}', 'overflow_detectors' must be a list with one detector per pair, but "
                            f"got {type(overflow_detectors).__name__}.")
        detectors = _per_pair("overflow_detectors", overflow_detectors, len(pairs))
        config = resolve_config(boost_config)
        _check_features(config, shared_overflow)
        info = parallel_info()
        networks = [network for network, _ in pairs]
        _check_weight_names(networks)
        self.shared_scale = not isinstance(scale_sense, (list, tuple))
        scales = [LossScale(senses[0])] if self.shared_scale else [LossScale(sense) for sense in senses]
        # A pair's frozen steps run inside this cell's one graph: the frozen-prefix cache was left out (warned).
        pair_config = config.replace("grad_freeze", cache_frozen_prefix=False, payback=False)
        optimizers = [freeze_optimizer(pair_config, network, optimizer) for network, optimizer in pairs]
        self.loss_scales = nn.CellList(scales, auto_prefix=False)
        # A pair moves its own scale in its step only when it owns it and decides alone; else this cell moves it.
        self.pairs_move_scales = not self.shared_scale and not shared_overflow
        steps = []
        for index, (network, optimizer, detector) in enumerate(zip(networks, optimizers, detectors)):
            scale = scales[0 if self.shared_scale else index]
            steps.append(build_step(
                network, optimizer, pair_config, info, who=_NAME,
                loss_scale=scale if self.pairs_move_scales else HeldLossScale(scale),
                overflow_detector=detector if detector is not None else make_overflow_detector(info.distributed)
            ).train_step)
        _name_state_apart(steps, {id(w) for network in networks for w in network.get_parameters()})
        # auto_prefix=False: a prefixing CellList (slices of one included) renames every parameter it holds.
        self.steps = nn.CellList(steps, auto_prefix=False)
        self.shared_overflow = shared_overflow
        self.count = len(pairs)
        report = overflow_report if overflow_report is not None else config.section("diagnostics")["overflow_report"]
        sources = [SimpleNamespace(network=network, scale_sense=scales[0 if self.shared_scale else index].scale_sense)
                   for index, network in enumerate(networks)]
        self.host_hooks = tuple(
            FirstOverflowReporter(path, source=source, pair=index)
            for index, (source, path) in enumerate(zip(sources, _pair_report_paths(report, self.count)))
            if path is not None)

    def construct(self, *inputs):
        if not self.host_hooks_ready:  # a constant while compiling (HostHooks)
            raise RuntimeError(self.host_hooks_refusal)
        if self.shared_overflow:
            return self._shared_decision(inputs)
        return self._own_decisions(inputs)

    def _own_decisions(self, inputs):
        """Each pair's whole step in list order; the next pair's inputs wait for this pair's overflow read."""
        losses, flags, scales = (), (), ()
        for index in range(self.count):
            outputs, _ = self.steps[index](*inputs)
            loss, overflow, scale = outputs
            inputs = tuple([ops.depend(value, overflow) for value in inputs])
            losses += (loss,)
            flags += (overflow,)
            scales += (scale,)
        if not self.pairs_move_scales:
            scales = self._move_scales(flags)
        return losses, flags, scales

    def _shared_decision(self, inputs):
        """Every pair's overflow window first (at the step's starting weights), then one decision for all."""
        losses, flags, grads = (), (), ()
        for index in range(self.count):
            loss, step_grads, overflow = self.steps[index].gradients(inputs)
            inputs = tuple([ops.depend(value, overflow) for value in inputs])
            losses += (loss,)
            flags += (overflow,)
            grads += (step_grads,)
        overflow = _any(flags)
        for index in range(self.count):
            if not overflow:
                self.steps[index].apply(losses[index], grads[index], inputs)
        return losses, flags, self._move_scales((overflow,) * self.count)

    def _move_scales(self, flags):
        """Run the policies (one per scale) on the skip decisions; the scales after the update, one per pair."""
        if self.shared_scale:
            _, scale = self.loss_scales[0](_any(flags), ())
            return (scale,) * self.count
        scales = ()
        for index in range(self.count):
            _, scale = self.loss_scales[index](flags[index], ())
            scales += (scale,)
        return scales
