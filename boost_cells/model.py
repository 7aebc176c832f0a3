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
"""
import dataclasses

import mindspore as ms
from mindspore import nn

from .auto_boost import AutoBoost
from .config import warn_user
from .mindspore_internals import ModelBuildHooks, amp_network
from .train_cells import build_train_network

__all__ = ["Model", "build_amp_train_network", "device_target"]


def device_target():
    """The device target of the context ("CPU", "GPU" or "Ascend")."""
    return ms.get_context("device_target")


def build_amp_train_network(network, optimizer, loss_fn, amp_level, boost_config, **amp_kwargs):
    """``mindspore.amp.build_train_network`` with boost_cells' train cell.

    ``amp_level`` ("O0", "O1", "O2", "O3", "auto") casts the network and picks the loss wrapper and the default
    loss-scale manager exactly as MindSpore does (O2's default is a ``DynamicLossScaleManager``, which runs on CPU
    here); ``amp_kwargs`` (``cast_model_type``, ``keep_batchnorm_fp32``, ``loss_scale_manager``) override the level.
    The manager then picks the cell as ``build_train_network`` does.

    Raises:
        ValueError, TypeError: as ``mindspore.amp.build_train_network`` for a bad level or keyword; as
            ``BoostConfig`` for a bad config.
    """
    network, loss_scale_manager = amp_network(network, loss_fn, amp_level, **amp_kwargs)
    cell = build_train_network(network, optimizer, boost_config, loss_scale_manager=loss_scale_manager)
    return cell.set_train()


class Model(ModelBuildHooks):
    """``mindspore.train.Model`` with boost_cells' boost levels; same signature and keyword arguments.

    Args:
        network, loss_fn, optimizer, metrics, eval_network, eval_indexes, amp_level: as ``mindspore.train.Model``.
        boost_level (str): "O0", "O1" or "O2". Default: "O0".
        **kwargs: ``loss_scale_manager``, ``keep_batchnorm_fp32`` (as ``mindspore.train.Model``),
            ``boost_config_dict`` (a dict in ``boost_config_dict`` format or a JSON config path; a ``"level"`` in it
            must agree with ``boost_level``), ``acc_level`` (deprecated alias of ``boost_level``).

    Attributes:
        boost (AutoBoost): the resolved boost (``boost.config`` is the ``BoostConfig`` the train cell uses).

    Raises:
        ValueError: a boost config that switches a feature on with a ``loss_fn`` but no ``optimizer`` (there is no
            train step to boost); anything ``mindspore.train.Model``, ``AutoBoost`` or ``build_amp_train_network``
            raises.

    Warns:
        BoostConfigWarning: a boost config that switches a feature on with neither ``loss_fn`` nor ``optimizer``:
            ``network`` (a ready train cell, ``Model(train_cell, boost_level="O1")``) trains, evaluates or
            predicts as it is, as MindSpore's ``Model`` does it, and the warning names the features not applied;
            ``less_bn.fn_flag`` on a network without an ``nn.Dense`` (see ``AutoBoost``).
    """

    def __init__(self, network, loss_fn=None, optimizer=None, metrics=None, eval_network=None, eval_indexes=None,
                 amp_level="O0", boost_level="O0", **kwargs):
        super().__init__(network, loss_fn=loss_fn, optimizer=optimizer, metrics=metrics, eval_network=eval_network,
                         eval_indexes=eval_indexes, amp_level=amp_level, boost_level=boost_level, **kwargs)

    def build_boost(self, parts, kwargs):
        """``AutoBoost``'s network and optimizer transforms, with or without metrics (see ``ModelBuildHooks``)."""
        level = kwargs.get("acc_level", parts.boost_level)
        self.boost = AutoBoost(level, kwargs.get("boost_config_dict", ""))
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
        """``mindspore.train.Model.train``, refusing dataset sink mode on GPU and Ascend when the train network has
        host-side features (``host_hooks``, e.g. the first-overflow report): sink mode runs the train cell nested in
        a data wrapper's graph, where they cannot run. (On CPU MindSpore falls back to non-sink mode, where they do.)

        Raises:
            ValueError: ``dataset_sink_mode=True`` on GPU/Ascend with a host-side feature on.
        """
        hooks = getattr(self.train_network, "host_hooks", ())
        if dataset_sink_mode and hooks and device_target() in ("GPU", "Ascend"):
            names = ", ".join(type(hook).__name__ for hook in hooks)
            raise ValueError(f"For 'Model.train', 'dataset_sink_mode' must be False on {device_target()} with the "
                             f"host-side feature(s) {names} on (sink mode runs the train cell inside a data wrapper's "
                             "graph, where no host code runs between steps), but got True.")
        return super().train(epoch, train_dataset, callbacks, dataset_sink_mode, sink_size, initial_epoch)

    def build_train(self, parts):
        """boost_cells' train cell after ``amp_level``'s cast (see ``ModelBuildHooks``); without an optimizer,
        MindSpore's own (the network with loss)."""
        if parts.optimizer is None:
            return None
        if not isinstance(parts.network, nn.Cell):
            raise TypeError(f"For 'Model', 'network' must be a Cell, but got {type(parts.network).__name__}.")
        return build_amp_train_network(parts.network, parts.optimizer, parts.loss_fn, parts.amp_level,
                                       self.boost.config, **parts.amp_kwargs)
