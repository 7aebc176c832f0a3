"""Every private MindSpore internal boost_cells relies on, each behind one small named wrapper.

MindSpore's public API does not cover everything a drop-in for ``mindspore.boost`` needs: ``boost_cells.Model``
must replace two private builders of ``mindspore.train.Model``, the overflow detector must ask the Ascend SoC a
question only ``_c_expression`` answers, and so on. Each such use lives here, and only here, with a docstring
saying what it relies on; ``tests/test_mindspore_internals.py`` pins each of those behaviours with one test, so a
MindSpore upgrade that changes one fails there, loudly, naming the internal, instead of somewhere deep in a
train cell.

Nothing else in the package imports a private MindSpore module or name or reads a private attribute of a MindSpore
object: the private-mindspore contract in ``.importlinter`` and ``tests/private_access_check.py`` (both run by
``tests/test_layers.py``) fail the build when something does.

The pinned version is MindSpore 2.10. This module is the bottom layer: it imports MindSpore only, nothing from
boost_cells.
"""
import dataclasses
import os

from mindspore import nn
from mindspore.common import dtype as mstype
from mindspore.common.sparse_tensor import RowTensorInner as _RowTensorInner  # imported here: graph code calls it
from mindspore.train import Model as _MindSporeModel

__all__ = ["ModelBuildHooks", "ModelParts", "SkipUnchangedCompilePhase", "amp_network", "ascend_uses_float_status",
           "communication_group_exists", "float32_flags", "forget_listed_parameter", "keep_float32",
           "make_row_tensor", "model_optimizer", "npu_clear_float_status", "npu_get_float_status",
           "optimizer_init_arguments", "prefixes_child_names", "refresh_sequential_cell", "reset_pynative_executor",
           "to_float_request", "with_loss_cell_parts"]


# ------------------------------------------------------------------------------------------------ nn.Cell


class SkipUnchangedCompilePhase:
    """Mixin for an ``nn.Cell`` (list it before ``nn.Cell`` or its subclass among the bases): setting
    ``compile_phase`` to the value it already has skips the walk down the sub-cell tree.

    Relies on: in GRAPH_MODE, every call of a Cell sets ``cell.compile_phase`` (``_CellGraphExecutor.compile``)
    before it looks the phase up in the compile cache, and ``nn.Cell``'s ``compile_phase`` setter stores the value
    in ``_compile_phase`` and sets it on every sub-cell (``_cells``), ~11 us per cell on CPU (125 us of a 2 ms MLP
    step). An unchanged phase means a compile-cache hit, so no compile ever follows a skipped walk; a new phase
    (new input shapes) still walks the tree before compiling.
    """

    @property
    def compile_phase(self):
        return self._compile_phase

    @compile_phase.setter
    def compile_phase(self, value):
        if value != self._compile_phase:
            nn.Cell.compile_phase.fset(self, value)


def prefixes_child_names(cell):
    """Whether ``cell`` prefixes its children's parameter names with their attribute names (``auto_prefix``).

    Relies on: ``nn.Cell.__init__(auto_prefix=...)`` keeps the flag in the private attribute ``_auto_prefix``.
    """
    return bool(cell._auto_prefix)  # pylint: disable=protected-access


def forget_listed_parameter(cell, parameter):
    """Forget that ``cell`` holds ``parameter`` in a plain list or tuple attribute, as the Parameter leaves the cell
    (its list is swapped for another): a later list may then hold another Parameter of the same name.

    Relies on: ``nn.Cell.__setattr__`` records each Parameter of an assigned list or tuple of Parameters (one that is
    not a ``ParameterTuple``: those go into the parameter table) in ``cell.exist_objs`` and its name in
    ``cell.exist_names`` (undocumented sets, never cleared by MindSpore), and raises ValueError for a Parameter of
    a recorded name that is not a recorded object.
    """
    if parameter in cell.exist_objs:
        cell.exist_objs.discard(parameter)
        cell.exist_names.discard(parameter.name)


def with_loss_cell_parts(cell):
    """``(backbone, loss_fn)``: the two arguments an ``nn.WithLossCell`` was built with.

    Relies on: ``nn.WithLossCell.__init__(backbone, loss_fn)`` keeps them in ``_backbone`` and ``_loss_fn`` (only the
    backbone has a public accessor, ``backbone_network``), and its ``construct`` calls them.
    """
    return cell._backbone, cell._loss_fn  # pylint: disable=protected-access


def refresh_sequential_cell(cell):
    """After a child of an ``nn.SequentialCell`` was replaced (``insert_child_to_cell``), make its ``construct`` run
    the new child; returns ``cell``.

    Relies on: ``nn.SequentialCell.construct`` iterates ``cell_list``, a list it builds from its children at
    construction and does not refresh (``mindspore.amp`` refreshes it the same way after casting a network).
    """
    cell.cell_list = list(cell.name_cells().values())
    return cell


def to_float_request(flags):
    """The dtype that a ``to_float(dtype)`` call asks for, read from the flags it passes to ``add_flags_recursive``
    (``mstype.float16``, ``mstype.bfloat16`` or ``mstype.float32``), or None when ``flags`` are not from
    ``to_float``. A cell that must stay float32 overrides ``add_flags_recursive`` and passes on
    ``float32_flags(flags)`` instead.

    Relies on: ``nn.Cell.to_float(dst_type)`` marks a network by
    ``add_flags_recursive(fp16=dst_type == float16, fp32=dst_type == float32, bf16=dst_type == bfloat16)``.
    """
    for key, dtype in (("fp16", mstype.float16), ("bf16", mstype.bfloat16), ("fp32", mstype.float32)):
        if flags.get(key):
            return dtype
    return None


def float32_flags(flags):
    """``flags`` of a ``to_float`` call changed to ask for float32 (see ``to_float_request``)."""
    return dict(flags, fp16=False, bf16=False, fp32=True)


def keep_float32(cell, flags):
    """For a cell whose numerics must stay float32 under mixed precision, from its ``add_flags_recursive``
    override: ``return super().add_flags_recursive(**keep_float32(self, flags))``. A ``to_float(float16)`` or
    ``to_float(bfloat16)`` (amp levels O2 and O3, on the cell or a network holding it) is passed on as float32, so
    the cell and its sub-cells run in float32, and the requested dtype is recorded in ``cell.output_dtype`` for its
    ``construct`` to cast its result to; ``to_float(float32)`` sets ``output_dtype`` to None (no cast); other flags
    pass unchanged. The override belongs in the cell's own class body, not in a mixin: amp O1's rewrite
    (``mindspore.rewrite``) rebuilds a cell's base classes from their source, importing each base's module by the
    bare name once its folder is on ``sys.path`` (the rewrite puts it there) where that import succeeds; a mixin from
    such a second copy of its module fails in its ``super()`` call with AttributeError.

    Relies on: ``to_float_request``'s flags, and on MindSpore running a float32-flagged cell in float32 inside a
    float16 network in both modes (in PyNative it casts every operator's inputs to the dtype of the innermost flagged
    cell, so an explicit ``ops.cast`` to float32 inside a float16 cell is undone at the next operator).
    """
    requested = to_float_request(flags)
    if requested is None:
        return flags
    cell.output_dtype = None if requested == mstype.float32 else requested
    return float32_flags(flags)


# ------------------------------------------------------------------------------------------------ optimizers


def optimizer_init_arguments(optimizer):
    """``(params, learning_rate, kwargs)``: the arguments ``optimizer`` was constructed with, to build another
    optimizer of its class (over other parameters) as ``type(optimizer)(params, learning_rate=..., **kwargs)``.

    ``learning_rate`` is the constructor's value, or, for a schedule (a Cell, which MindSpore does not record), the
    optimizer's ``learning_rate`` cell; None for an optimizer without one (``nn.LARS``). ``kwargs`` are the other
    constructor arguments with defaults filled in (a ``**kwargs`` catch-all merged in).

    Relies on: the ``opt_init_args_register`` decorator on MindSpore's optimizer constructors records
    ``init_params`` (``{"params": ...}``; the inner optimizer's for ``nn.LARS``), ``init_learning_rate`` (None
    for a Cell) and ``init_args`` (every other bound argument).
    """
    kwargs = dict(optimizer.init_args)
    kwargs.update(kwargs.pop("kwargs", {}))
    learning_rate = getattr(optimizer, "init_learning_rate", None)
    if learning_rate is None:
        learning_rate = getattr(optimizer, "learning_rate", None)
    return optimizer.init_params["params"], learning_rate, kwargs


def make_row_tensor(indices, values, dense_shape):
    """A ``RowTensor`` (sparse gradient rows) from its parts; usable inside graph code.

    Relies on: ``mindspore.common.sparse_tensor.RowTensorInner``, the constructor MindSpore's own optimizers use
    for sparse gradients (the public ``RowTensor`` is deprecated), taking ``(indices, values, shape)``.
    """
    return _RowTensorInner(indices, values, dense_shape)


# ------------------------------------------------------------------------------------------------ devices


def ascend_uses_float_status():
    """Whether this Ascend SoC detects overflow through the NPU float-status register: Ascend 910A always, 910B
    only in saturation mode (``MS_ASCEND_CHECK_OVERFLOW_MODE=SATURATION_MODE``).

    Relies on: ``mindspore._c_expression.MSContext.get_instance().ascend_soc_supports_feature("train_hq_dtype_line")``
    (the check ``mindspore.amp`` makes), True on SoCs with the inf/nan mode (910B and later), False elsewhere.
    """
    from mindspore._c_expression import MSContext  # pylint: disable=import-outside-toplevel
    if MSContext.get_instance().ascend_soc_supports_feature("train_hq_dtype_line"):
        return os.environ.get("MS_ASCEND_CHECK_OVERFLOW_MODE") == "SATURATION_MODE"
    return True


def npu_clear_float_status():
    """A new ``NPUClearFloatStatusV2`` primitive (Ascend only; no CPU kernel).

    Relies on: the primitive living in ``mindspore.ops.operations.math_ops`` (it is not exported by ``ops``).
    """
    from mindspore.ops.operations.math_ops import NPUClearFloatStatusV2  # pylint: disable=import-outside-toplevel
    return NPUClearFloatStatusV2()


def npu_get_float_status():
    """A new ``NPUGetFloatStatusV2`` primitive (Ascend only; no CPU kernel); see ``npu_clear_float_status``."""
    from mindspore.ops.operations.math_ops import NPUGetFloatStatusV2  # pylint: disable=import-outside-toplevel
    return NPUGetFloatStatusV2()


def reset_pynative_executor():
    """Drop the PyNative executor's grad-graph state, as a new process has it.

    A forward pass that raises while gradients are being taken in PYNATIVE_MODE (a train cell whose network raises
    a ValueError for a bad argument, say) leaves the executor's grad state open; every later PyNative step in the
    process then fails (tensor indexing by an int raises "Only support integers ... but got 0"). This resets it.

    Relies on: ``mindspore.graph.api._pynative_executor.clear_res()`` (what ``mindspore.ms_function`` cleanup and
    MindSpore's own tests use), which also closes a grad graph left open (``grad_flag()`` becomes False).
    """
    from mindspore.graph.api import _pynative_executor  # pylint: disable=import-outside-toplevel
    _pynative_executor.clear_res()


def communication_group_exists(name):
    """Whether a communication group ``name`` was created in this process (by us or by the user).

    Relies on: ``mindspore.communication.create_group`` records every group it created, with its ranks, in
    ``mindspore.communication._comm_helper._ExistingGroup.ITEMS`` and checks it first (a repeated name with the
    same ranks only logs a warning; with other ranks it raises).
    """
    from mindspore.communication._comm_helper import _ExistingGroup  # pylint: disable=import-outside-toplevel
    return name in _ExistingGroup.ITEMS


# ------------------------------------------------------------------------------------------------ mindspore.amp


def amp_network(network, loss_fn, amp_level, **amp_kwargs):
    """``(network, loss_scale_manager)``: what ``mindspore.amp.build_train_network`` does before it builds the
    train cell. ``amp_level`` ("O0", "O1", "O2", "O3", "auto") casts ``network`` and picks the loss wrapper
    (``loss_fn`` given) and the default loss-scale manager (O2: a ``DynamicLossScaleManager``) exactly as MindSpore
    does; ``amp_kwargs`` (``cast_model_type``, ``keep_batchnorm_fp32``, ``loss_scale_manager``) override the level.

    Relies on: ``mindspore.train.amp``'s ``_check_kwargs``, ``_check_level``, ``_config_level`` (the per-level
    settings), ``_auto_mixed_precision_process`` and ``_add_loss_network``, the steps of its
    ``build_train_network``.

    Raises:
        ValueError, TypeError: as ``mindspore.amp.build_train_network`` for a bad level or keyword.
    """
    # pylint: disable=protected-access
    from mindspore.train import amp as _amp  # pylint: disable=import-outside-toplevel
    _amp._check_kwargs(amp_kwargs)
    level, _ = _amp._check_level(amp_level, "O0")
    settings = dict(_amp._config_level[level], **amp_kwargs)
    network = _amp._auto_mixed_precision_process(network, settings, level)
    if loss_fn:
        network = _amp._add_loss_network(network, loss_fn, settings["cast_model_type"])
    return network, settings["loss_scale_manager"]


# ------------------------------------------------------------------------------------------------ mindspore.train.Model


@dataclasses.dataclass(frozen=True)
class ModelParts:
    """What ``mindspore.train.Model.__init__`` holds when it builds its networks (read-only; change with
    ``dataclasses.replace``).

    Attributes:
        network, loss_fn, optimizer, eval_network: the constructor's arguments (as transformed so far).
        amp_level (str), boost_level (str): the levels.
        amp_kwargs (dict): the ``loss_scale_manager`` and ``keep_batchnorm_fp32`` keyword arguments that were given.
    """
    network: object
    loss_fn: object
    optimizer: object
    eval_network: object
    amp_level: str
    boost_level: str
    amp_kwargs: dict


def _model_parts(model):
    # pylint: disable=protected-access
    amp_kwargs = {}
    if model._loss_scale_manager_set:
        amp_kwargs["loss_scale_manager"] = model._loss_scale_manager
    if model._keep_bn_fp32 is not None:
        amp_kwargs["keep_batchnorm_fp32"] = model._keep_bn_fp32
    return ModelParts(model._network, model._loss_fn, model._optimizer, model._eval_network, model._amp_level,
                      model._boost_level, amp_kwargs)


def _store_model_parts(model, parts):
    # pylint: disable=protected-access
    model._network, model._optimizer, model._eval_network = parts.network, parts.optimizer, parts.eval_network
    model._boost_level = parts.boost_level


def model_optimizer(model):
    """The optimizer ``model`` (a ``mindspore.train.Model``) trains with, or None: the constructor's, after the boost
    transform.

    Relies on: ``Model`` keeps it in ``_optimizer``, which its ``train`` hands its callbacks as ``optimizer``.
    """
    return model._optimizer  # pylint: disable=protected-access


def _set_train_network_inputs(train_network, network, loss_fn):
    """Give ``train_network`` the input signature of ``network`` (and of ``loss_fn``'s label inputs), as Model's own
    builder does for networks with ``set_inputs`` (dynamic shapes)."""
    # pylint: disable=import-outside-toplevel
    from mindspore.train.model import _merge_inputs, _process_loss_inputs, _set_with_processed_inputs
    net_inputs = network.get_inputs()
    if loss_fn and loss_fn.get_inputs() and net_inputs:
        net_inputs = _merge_inputs(net_inputs, _process_loss_inputs(loss_fn.get_inputs()))
    if net_inputs is not None:
        _set_with_processed_inputs(train_network, net_inputs)


class ModelBuildHooks(_MindSporeModel):
    """``mindspore.train.Model`` whose two private build steps call public hooks, ``build_boost`` and
    ``build_train``, that a subclass overrides; same constructor.

    - ``build_boost(parts, kwargs) -> ModelParts``: the boost transform, given the ``ModelParts`` and the
      constructor's ``**kwargs``; what it returns becomes the model's network, optimizer, eval network and boost
      level. Default: no transform (MindSpore's own would apply ``mindspore.boost``).
    - ``build_train(parts) -> Cell or None``: the train network; None builds MindSpore's own. The train network
      gets the network's (and loss function's) input signature, as in MindSpore's builder.

    Relies on (``mindspore/train/model.py``): ``Model.__init__`` keeps its arguments in ``_network``,
    ``_loss_fn``, ``_optimizer``, ``_eval_network``, ``_amp_level``, ``_boost_level``, ``_loss_scale_manager``
    (``_loss_scale_manager_set`` when given) and ``_keep_bn_fp32``, then calls ``self._build_boost_network(kwargs)``,
    then ``self._build_train_network()``, whose result it keeps in ``_train_network`` (with the network's
    ``jit_config_dict`` as its ``_jit_config_dict``): ``train_network`` and every ``train`` (its callbacks and
    checkpoints included) read that attribute, and ``train`` reads the optimizer from ``_optimizer``. Then it builds
    the eval network from ``_eval_network``; input signatures are merged by ``_merge_inputs``,
    ``_process_loss_inputs`` and ``_set_with_processed_inputs``.
    """

    def build_boost(self, parts, kwargs):  # pylint: disable=unused-argument
        """The boost transform (see the class docstring); default: none."""
        return parts

    def build_train(self, parts):  # pylint: disable=unused-argument
        """The train network (see the class docstring); default: None, MindSpore's own."""
        return None

    def _build_boost_network(self, kwargs):
        _store_model_parts(self, self.build_boost(_model_parts(self), kwargs))

    def _build_train_network(self):
        parts = _model_parts(self)
        network = self.build_train(parts)
        if network is None:
            return super()._build_train_network()
        _set_train_network_inputs(network, parts.network, parts.loss_fn)
        return network
