"""The groups of gradient freezing and the ``FreezeOpt`` a config asks for.

``GradientFreeze`` (drop-in for ``mindspore.boost.GradientFreeze``) cuts a network's trainable parameters front to
back into layers, then into nested suffixes (the train groups), and builds the ``FreezeOpt`` over them with the
config's schedule: a sequence drawn in advance, or the automatic schedule's criterion, whose interval and warm-up
are shares of the run (``total_steps`` updates) so that it decides at the same point of training whatever the
dataset's size and the number of workers.
"""
from types import MappingProxyType

import numpy as np
from mindspore.nn.optim import Optimizer

from ...user_warnings import warn_user
from ...rules import check
from ..schedule.plan import FreezePlan
from ..host.prefix_cache import staged_network
from ..schedule.sequences import check_freeze_args, freeze_index_sequence
from .suffix_optimizers import FreezeOpt

__all__ = ["GradientFreeze", "fit_groups", "freeze_optimizer", "split_layers"]


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


class GradientFreeze:
    """Builds the ``FreezeOpt`` of a network: groups and schedule. Drop-in for ``mindspore.boost.GradientFreeze``.

    Args:
        param_groups (int): number of train groups, >= 1. freeze_type (int): 0 continuous, 1 interval, 2
            progressive (see ``freeze_index_sequence``), 3 or "auto": the front freezes for good once settled
            (``boost_cells.freezing.schedule.schedules.AutoSchedule``). freeze_p (float): in [0, 1], the fraction of
            steps that train every group. total_steps (int): the run's optimizer updates, >= 1 (``Model.train`` sets it
            from its run; a train cell whose config left it out says at its first call that it assumes 65536, unless
            something fitted it to its run: ``fit_to_run``). seed (int): the interval schedule's seed.
        auto_interval_share (float): in (0, 1], the automatic schedule's interval between two decisions as a share
            of ``total_steps`` (at least 1 update). auto_warmup_share (float): in [0, 1), the share of
            ``total_steps`` trained whole before anything may freeze (rounded up to whole updates).
            auto_threshold (float): > 0, the displacement of a segment's weights per 100 updates, against their
            size, below which the segment has settled (``AutoSchedule``). auto_head_ratio (float): in [0, 1], a
            segment has also settled when its displacement is below this share of the head's (0: no comparison).
            auto_loss_drop (float): in [0, 1), nothing freezes until the training loss's mean over an interval lies
            this share below its mean over the first interval (a network still at chance has no settled front; 0:
            no such condition). auto_loss_last_fall (float): in [0, 1], nothing freezes while the last interval's
            fall of that mean exceeds this share of its whole fall since the first interval (a loss still falling
            steeply is a task still being learned; 1: no such condition).
            payback (bool): the automatic schedule freezes to the levels whose compile the run's steps left repay,
            from the run's own measured step and compile times (``boost_cells.freezing.host.payback``; read by the train
            cell); False: the whole front at once, that level compiled with the step, on every machine alike.
        cache_frozen_prefix (bool or str): True: cut the groups at the network's stage boundaries
            (``staged_network``), so that a train cell can cache the outputs of the groups frozen for good. "auto":
            the same where the automatic schedule runs and the network has at least ``param_groups`` stages with
            trainable parameters (the train cell then caches only where the run measures that it pays), else as
            False. cache_max_mb (int): that cache's memory, in MB (read by the train cell).

    Raises:
        ValueError: a bad ``freeze_type``, ``freeze_p``, ``param_groups``, ``total_steps`` or ``seed``.
    """

    def __init__(self, param_groups, freeze_type, freeze_p, total_steps, seed=0, auto_interval_share=0.05,
                 auto_warmup_share=0.1, auto_threshold=0.4, auto_head_ratio=0.5, payback=True,
                 cache_frozen_prefix=False, cache_max_mb=2048, auto_loss_drop=0.5, auto_loss_last_fall=0.1):
        check_freeze_args("GradientFreeze", freeze_type, freeze_p)
        self.run_assumed = False  # freeze_optimizer: a config that left total_steps out, whose default is assumed
        arguments = {"param_groups": param_groups, "freeze_type": freeze_type, "freeze_p": freeze_p,
                     "total_steps": total_steps, "seed": seed, "auto_interval_share": auto_interval_share,
                     "auto_warmup_share": auto_warmup_share, "auto_threshold": auto_threshold,
                     "auto_head_ratio": auto_head_ratio, "auto_loss_drop": auto_loss_drop,
                     "auto_loss_last_fall": auto_loss_last_fall, "payback": payback,
                     "cache_frozen_prefix": cache_frozen_prefix, "cache_max_mb": cache_max_mb}
        for name, value in arguments.items():
            check("GradientFreeze", name, value)
        self.section = MappingProxyType(arguments)  # as a config's grad_freeze section: what FreezePlan reads
        self.cache_frozen_prefix = cache_frozen_prefix
        self._automatic = freeze_type in (3, "auto")
        self._param_groups = int(param_groups)
        self._seed = int(seed)

    def layers(self, net):
        """``(layers, what)``: ``net``'s layers as lists of trainable parameters, and what a layer is, in words. A
        layer is a weight with its bias and BatchNorm (``split_layers``); where the frozen-prefix cache cuts the
        groups (``cache_stages``), a stage of the network that has trainable parameters, so that a frozen prefix is
        whole stages.

        Raises:
            TypeError: ``cache_frozen_prefix`` True and a network without stages.
        """
        return self._layers(net)[:2]

    def _layers(self, net):
        """``(layers, what, by_stage)``: ``layers`` as ``layers`` returns them, and whether they are stages."""
        stages = self.cache_stages(net)
        if stages is not None:
            return stages, "stage(s) with trainable parameters (the frozen-prefix cache freezes whole stages)", True
        return split_layers(net.trainable_params()), "layer(s) (a layer is a weight with its bias and BatchNorm)", False

    def cache_stages(self, net):
        """The trainable parameters of each of ``net``'s stages that has some, where the groups are cut at stages
        for the frozen-prefix cache: always with ``cache_frozen_prefix`` True; with "auto", under the automatic
        schedule and where the network has stages (``staged_network``), at least ``param_groups`` of them with
        trainable parameters. Else None (the groups are cut at layers).

        Raises:
            TypeError: ``cache_frozen_prefix`` True and a network without stages.
        """
        if self.cache_frozen_prefix is True:
            return _stage_layers(staged_network(net))
        if self.cache_frozen_prefix != "auto" or not self._automatic:
            return None
        try:
            stages = _stage_layers(staged_network(net))
        except TypeError:
            return None
        return stages if len(stages) >= self._param_groups else None

    def split_parameters_groups(self, net, freeze_para_groups_number):
        """``freeze_para_groups_number`` nested suffixes of ``net``'s trainable parameters: with ``L`` layers
        (``layers``) and ``s = L // groups``, group ``i`` holds layers ``i * s`` to the end. Cut at stages for the
        frozen-prefix cache (``cache_stages``), group ``i`` starts at the stage whose layers before it (weights of two
        or more dimensions, at least one a stage) come nearest ``i / groups`` of the network's (``stage_starts``), so
        a frozen prefix holds the share of the work it would hold cut at layers. More groups than layers mean what
        they mean in ``mindspore.boost`` (``s = 0``: every group is the whole network, so nothing ever freezes), with
        a ``BoostConfigWarning``: it is likely a mistake.

        Raises:
            TypeError: ``cache_frozen_prefix`` and a network without stages.
        """
        groups = int(check("GradientFreeze", "freeze_para_groups_number", freeze_para_groups_number))
        layers, what, by_stage = self._layers(net)
        if groups > len(layers):
            warn_user(f"For 'GradientFreeze', 'param_groups' is {groups} but the network has {len(layers)} {what}: "
                      "as in mindspore.boost, every group is then the whole network, so nothing ever freezes. Pass "
                      f"at most {len(layers)} groups to freeze.")
        elif by_stage:
            return [sum(layers[start:], []) for start in stage_starts(layers, groups)]
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
        return network, FreezeOpt(optimizer, groups,
                                  plan=FreezePlan.from_section(self.section, run_assumed=self.run_assumed))


def stage_starts(stages, groups):
    """The first stage of each of ``groups`` groups over ``stages`` (lists of parameters, at most one group a stage):
    0, then for group ``i`` the stage, after the one before and leaving one a later group, whose layers before it
    (weights of two or more dimensions, at least one a stage) come nearest ``i / groups`` of all the layers."""
    layers = [max(1, sum(len(p.shape) >= 2 for p in stage)) for stage in stages]
    before = np.cumsum([0] + layers[:-1])
    starts = [0]
    for group in range(1, groups):
        target = group * sum(layers) / groups
        candidates = range(starts[-1] + 1, len(stages) - (groups - 1 - group))
        starts.append(min(candidates, key=lambda stage: abs(before[stage] - target)))
    return starts


def _stage_layers(staged):
    """The trainable parameters of each stage of ``staged`` (a ``StagedNetwork``) that has some."""
    return [layer for layer in (stage.trainable_params() for stage in staged.stages) if layer]


def freeze_optimizer(config, network, optimizer):
    """The optimizer a train cell trains with: a ``FreezeOpt`` when the config's ``grad_freeze`` is on (unless
    ``optimizer`` already is one), else ``optimizer``.

    A ``grad_freeze.param_groups`` the config leaves out is its level's default, fitted to the network: at most one
    group a layer (``fit_groups``). One the config gives must fit the network.

    Raises:
        ValueError: a given ``grad_freeze.param_groups`` above the network's layers (the message says how many).
    """
    if isinstance(optimizer, FreezeOpt) or not config.enabled("grad_freeze"):
        return optimizer
    section = dict(config.section("grad_freeze"))
    layers, what = GradientFreeze(**section).layers(network)
    if config.given("grad_freeze.param_groups") and section["param_groups"] > len(layers):
        raise ValueError(f"For 'BoostConfig', 'grad_freeze.param_groups' must be at most the network's "
                         f"{len(layers)} {what}, but got {section['param_groups']}. Leave the key out to use the "
                         "level's default, fitted to the network.")
    section["param_groups"] = fit_groups(section["param_groups"], len(layers))
    freeze = GradientFreeze(**section)
    freeze.run_assumed = not config.given("grad_freeze.total_steps")
    return freeze.freeze_generate(network, optimizer)[1]


def fit_groups(groups, layers):
    """The groups a level's default ``groups`` gives a network of ``layers`` layers: at most one a layer."""
    return max(1, min(groups, layers))
