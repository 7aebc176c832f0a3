"""``boost_cells.Model``: ``mindspore.train.Model`` whose boost level builds boost_cells' train network.

MindSpore's ``Model`` hard-wires ``mindspore.boost``, and it applies a boost level only when metrics or an eval
network are given: otherwise it silently trains plain O0 (and reports the loss as None). This ``Model`` keeps the
same signature and everything else of ``mindspore.train.Model`` (callbacks, ``eval``, ``predict``, checkpoints)
and overrides only the two builders (through ``mindspore_internals.ModelBuildHooks``): the boost config resolves
through ``AutoBoost`` (so its ``network_auto_process_train/eval`` transform the network and optimizer), and the train
cell comes from ``build_train_network``, after ``amp_level``'s mixed-precision cast and loss wrapper as
``mindspore.amp`` does them.
A level that cannot be applied is never a silent O0: with a loss but no optimizer it is an error; with neither (the
network is a ready train cell, as acn_mindspore passes one) the cell trains as it is, as in MindSpore, with a
warning that names the features left out.

Only ``train`` knows the run's length, which an interval, progressive or automatic freezing schedule is made for
(``grad_freeze.total_steps``): the first ``train`` sets a left-out ``total_steps`` from its epochs and dataset and
fits the train cell's schedule to it (``BoostTrainOneStepCell.fit_to_run``, handed the ``Run`` counted once), before
anything of it was compiled or run; a given one that differs from the run is kept, with the cell's warning that says
when freezing starts (``boost_cells.freezing.schedule.plan.run_differs``).

Then ``train`` logs what the boost config does in this run (``boost_cells.explain``), through the logger
``boost_cells.model``: one INFO line (the level, the features on, when freezing can start in the run) and the whole
summary at DEBUG. The package adds no log handler, so nothing shows unless the program configures logging (e.g.
``logging.basicConfig(level=logging.INFO)``).
"""
import dataclasses
import logging

import mindspore as ms
from mindspore import nn

from .auto_boost import AutoBoost
from .user_warnings import warn_user
from .distributed import parallel_info
from .explain import explain, summary
from .mindspore_internals import ModelBuildHooks, amp_network, model_optimizer
from .rules import complies
from .run import Run
from .train_cells import build_train_network

__all__ = ["Model", "device_target"]

_LOG = logging.getLogger(__name__)


def device_target():
    """The device target of the context ("CPU", "GPU" or "Ascend")."""
    return ms.get_context("device_target")


def _train_cell(amp_parts, optimizer, boost_config):
    """boost_cells' train cell on ``amp_parts``, the ``(network with loss, loss-scale manager)`` that ``amp_level``
    makes exactly as ``mindspore.amp.build_train_network`` does (``amp_network``: the cast, the loss wrapper, O2's
    default ``DynamicLossScaleManager``, which runs on CPU here); the manager picks the cell as
    ``build_train_network`` does."""
    network, loss_scale_manager = amp_parts
    return build_train_network(network, optimizer, boost_config, loss_scale_manager=loss_scale_manager).set_train()


def _steps_per_epoch(dataset, dataset_sink_mode, sink_size):
    """The steps of one ``Model.train`` epoch: ``sink_size`` in sink mode (on CPU MindSpore falls back to non-sink
    mode, one pass over the dataset), else the dataset's size; None for something that is not a dataset (MindSpore's
    own checks refuse it)."""
    if dataset_sink_mode and sink_size > 0 and device_target() != "CPU":
        return sink_size
    size = getattr(dataset, "get_dataset_size", None)
    return None if size is None else size()


class Model(ModelBuildHooks):
    """``mindspore.train.Model`` with boost_cells' boost levels; same signature and keyword arguments.

    Args:
        network, loss_fn, optimizer, metrics, eval_network, eval_indexes, amp_level: as ``mindspore.train.Model``.
        boost_level (str): "O0", "O1" or "O2". Default: "O0".
        **kwargs: ``loss_scale_manager``, ``keep_batchnorm_fp32`` (as ``mindspore.train.Model``),
            ``boost_config_dict`` (a dict in ``boost_config_dict`` format, a JSON config path or a shipped config's
            name, as ``AutoBoost``; a ``"level"`` in it must agree with ``boost_level``), ``acc_level`` (deprecated
            alias of ``boost_level``).

    Attributes:
        boost (AutoBoost): the resolved boost (``boost.config`` is the ``BoostConfig`` the train cell uses; after
            ``train`` set ``grad_freeze.total_steps`` from the run, the one with that value). It is the Model's own:
            unlike ``AutoBoost(level, config)`` it does not put its config in force in the process, so two Models
            train with their own configs (the reference's keep the first one's) and cells built by hand are not
            affected.

    Raises:
        ValueError: a boost config that switches a feature on with a ``loss_fn`` but no ``optimizer`` (there is no
            train step to boost); anything ``mindspore.train.Model``, ``AutoBoost`` or ``amp_level``'s cast raises.

    Warns:
        BoostConfigWarning: a boost config that switches a feature on with neither ``loss_fn`` nor ``optimizer``:
            ``network`` (a ready train cell, ``Model(train_cell, boost_level="O1")``) trains, evaluates or
            predicts as it is, as MindSpore's ``Model`` does it, and the warning names the features not applied;
            ``less_bn.fn_flag`` on a network without an ``nn.Dense`` (see ``AutoBoost``).
    """

    def __init__(self, network, loss_fn=None, optimizer=None, metrics=None, eval_network=None, eval_indexes=None,
                 amp_level="O0", boost_level="O0", **kwargs):
        self._amp_parts = None  # amp_network's (network with loss, manager): built once, as amp casts a network once
        super().__init__(network, loss_fn=loss_fn, optimizer=optimizer, metrics=metrics, eval_network=eval_network,
                         eval_indexes=eval_indexes, amp_level=amp_level, boost_level=boost_level, **kwargs)

    def build_boost(self, parts, kwargs):
        """``AutoBoost``'s network and optimizer transforms, with or without metrics (see ``ModelBuildHooks``)."""
        level = kwargs.get("acc_level", parts.boost_level)
        self.boost = AutoBoost.holding(kwargs.get("boost_config_dict", ""), level)
        if parts.optimizer is None:
            enabled = [name for name, on in self.boost.boost_config.items() if on]
            if enabled and parts.loss_fn is not None:
                raise ValueError(f"For 'Model', boost level {level!r} switches on {enabled}, which "
                                 "act on the training step, but 'optimizer' is None. Pass an optimizer, or use "
                                 "boost_level 'O0' for a Model that only evaluates or predicts.")
            if enabled:
                warn_user(f"For 'Model', boost level {level!r} switches on {enabled}, but 'optimizer' and 'loss_fn' "
                          "are None: 'network' is taken as a ready train cell (or a network to evaluate or predict "
                          "with) and used as it is, without those features. To boost it, pass the network with loss "
                          "and its optimizer, or build the train cell with boost_cells.build_train_network.")
            return dataclasses.replace(parts, boost_level=level)
        network, optimizer = self.boost.network_auto_process_train(parts.network, parts.optimizer)
        eval_network = parts.eval_network
        if eval_network is not None:
            eval_network = self.boost.network_auto_process_eval(eval_network)
        return dataclasses.replace(parts, network=network, optimizer=optimizer, eval_network=eval_network,
                                   boost_level=level)

    def train(self, epoch, train_dataset, callbacks=None, dataset_sink_mode=False, sink_size=-1, initial_epoch=0):
        """``mindspore.train.Model.train``, with the freezing schedule fitted to the run, and in dataset sink mode on
        GPU and Ascend without host-side features: sink mode runs the train cell nested in a data wrapper's graph,
        where no host code runs between steps. There the frozen-prefix cache is left out (one
        ``BoostConfigWarning`` naming ``grad_freeze.cache_frozen_prefix``; freezing itself is decided in the graph
        and stays), and any other host-side feature (the first-overflow report) refuses the run. (On CPU MindSpore
        falls back to non-sink mode, where they all run.)

        An interval, progressive or automatic freezing schedule from the config (``grad_freeze.freeze_type`` 1, 2
        or 3) is made for ``grad_freeze.total_steps`` updates: a sequence of that length, or the automatic
        schedule's interval and warm-up as shares of it. The run has ``epoch`` times the steps per epoch (the
        dataset's size; ``sink_size`` in sink mode), divided by the accumulation steps: counted from epoch 0 even
        when resuming at ``initial_epoch``, so a resumed run gets the schedule of the uninterrupted one. When the
        config leaves ``total_steps`` out, the first ``train`` sets it to that count (``boost.config`` then holds it).
        A given ``total_steps``, or the one set by an earlier ``train``, that differs from the run stays, with a
        ``BoostConfigWarning`` that says when freezing can start. Setting it fits the train cell's schedule to the
        run (``fit_to_run``) before anything of it was compiled or run; nothing is rebuilt, so state loaded into the
        cell (a checkpoint, to resume) stays. The continuous schedule needs no step count.

        Then it logs what the boost config does in this run, with ``total_steps`` as fitted: one INFO record
        (``boost_cells.explain.summary``) and the whole summary at DEBUG (``boost_cells.explain.explain``), through
        the logger ``boost_cells.model``.

        Raises:
            ValueError: ``dataset_sink_mode=True`` on GPU/Ascend with a host-side feature other than the cache on.

        Warns:
            BoostConfigWarning: a schedule made for another number of updates than the run has; the cache left out
                in sink mode.
        """
        sink, fit = {}, {}
        if dataset_sink_mode and device_target() in ("GPU", "Ascend"):
            sink = self._sink_mode_changes()
        steps = _steps_per_epoch(train_dataset, dataset_sink_mode, sink_size)
        run = None  # a bad epoch count or an empty dataset is left to MindSpore's own checks
        if complies("steps_per_epoch", steps):
            run = Run(epoch if complies("epochs", epoch) else None, steps)
        # The config as this run uses it, but with a total_steps that this call fits still left out: the summary
        # then says it comes from the run (and counts it as this call did).
        logged = self.boost.config.replace("grad_freeze", **sink) if sink else self.boost.config
        if model_optimizer(self) is not None and run is not None:
            fit = self._fit_to_run(run)
        if sink or fit:
            self.boost.config = self.boost.config.replace("grad_freeze", **sink, **fit)
        self._log_boost(logged, run if run is not None and run.epochs is not None else None)
        return super().train(epoch, train_dataset, callbacks, dataset_sink_mode, sink_size, initial_epoch)

    def _log_boost(self, config, run):
        """Log what ``config`` does in ``run`` (a ``Run``, as ``train`` counted it once for the cell's fit too); in
        run numbers unless ``run`` is None (an epoch count or dataset MindSpore's own checks then refuse)."""
        if not _LOG.isEnabledFor(logging.INFO):
            return
        if model_optimizer(self) is None and any(config.features.values()):
            _LOG.info("boost level %s not applied: the network trains as it is (the Model has no optimizer).",
                      config.level_name)
            return
        plan = getattr(self.train_network, "freeze_plan", None)  # the one plan the cell follows, fitted to this run
        _LOG.info("%s", summary(config, run, plan))
        if _LOG.isEnabledFor(logging.DEBUG):
            info = parallel_info()
            _LOG.debug("What the boost config does in this run:\n%s",
                       "\n".join(explain(config, run, info.size if info.distributed else 1, plan)))

    def _sink_mode_changes(self):
        """The ``grad_freeze`` changes sink mode on GPU/Ascend needs: the frozen levels' route (the frozen-prefix
        cache, payback) steps aside (with a warning), so the train cell's own step, freezing inside the graph, runs in
        the device's loop; raise for any other host-side feature."""
        cell = self.train_network
        route = getattr(cell, "level_route", None)
        hooks = [hook for hook in getattr(cell, "active_hooks", ()) if hook is not route]
        if hooks:
            names = ", ".join(type(hook).__name__ for hook in hooks)
            raise ValueError(f"For 'Model.train', 'dataset_sink_mode' must be False on {device_target()} with the "
                             f"host-side feature(s) {names} on (sink mode runs the train cell inside a data wrapper's "
                             "graph, where no host code runs between steps), but got True.")
        if route is None or not route.active:
            return {}
        keys = [key for key, on in (("cache_frozen_prefix", route.cache is not None),
                                    ("payback", route.payback)) if on]
        named = " and ".join(f"'grad_freeze.{key}'" for key in keys)
        route.step_aside(f"For 'Model.train', {named} {'are' if len(keys) > 1 else 'is'} left out in dataset sink "
                         f"mode on {device_target()}: the frozen levels' route runs on the host between steps, and "
                         "sink mode runs the steps inside the device's loop. Freezing itself is decided in the graph "
                         "and stays, the whole front at once, that level compiled with the step; set the key(s) to "
                         "false, or use dataset_sink_mode=False to keep them.")
        return dict.fromkeys(keys, False)

    def _fit_to_run(self, run):
        """Fit the train cell to ``run`` (its ``fit_to_run``: the plan's one rule for the run's length, and its
        warning where a kept one differs); the ``grad_freeze`` change that records a ``total_steps`` it set from the
        run, or none."""
        before = self.train_network.freeze_plan
        self.train_network.fit_to_run(run)
        fitted = self.train_network.freeze_plan
        return {} if fitted is before else {"total_steps": fitted.total_steps}

    def build_train(self, parts):
        """boost_cells' train cell after ``amp_level``'s cast (see ``ModelBuildHooks``); without an optimizer,
        MindSpore's own (the network with loss)."""
        if parts.optimizer is None:
            return None
        if not isinstance(parts.network, nn.Cell):
            raise TypeError(f"For 'Model', 'network' must be a Cell, but got {type(parts.network).__name__}.")
        if self._amp_parts is None:
            self._amp_parts = amp_network(parts.network, parts.loss_fn, parts.amp_level, **parts.amp_kwargs)
        return _train_cell(self._amp_parts, parts.optimizer, self.boost.config)
