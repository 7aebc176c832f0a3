"""Overflow locator: which cell first produced inf, nan or a value at its dtype's extremes, forward or backward.

When the loss scale keeps falling, the first offender is the one to fix; later ones are usually its consequences.
In float16 on Ascend (saturation mode) an overflow clamps to +-65504 instead of becoming inf, so a value reaching
the largest finite value of its dtype (+-65504 for float16) counts as an overflow ("saturated"), not only inf/nan.

Cell hooks fire only in PYNATIVE_MODE, so ``locate_overflow`` switches to it for one forward and one backward pass
and then restores the mode it found, also when the network raises. It runs on the host, outside any training step,
and leaves the network as it found it (the backward pass updates no weight; non-trainable Parameters such as
BatchNorm statistics are restored).
``FirstOverflowReporter`` (used by the loss-scaled train cell) and ``OverflowReportCallback`` (for ``Model.train``)
run it once, on the first overflowing step of a run, on that step's batch and loss scale.
"""
import contextlib
import json
import logging
import math
import os
from dataclasses import asdict, dataclass
from types import MappingProxyType

import mindspore as ms
import numpy as np
from mindspore import Tensor, nn, ops
from mindspore.common import dtype as mstype
from mindspore.train import Callback

from ..distributed import parallel_info
from ..mindspore_internals import prefixes_child_names, reset_pynative_executor
from ..rules import allowed, complies
from ..files import writable_path, write_atomic

__all__ = ["OverflowRecord", "OverflowReport", "locate_overflow", "FirstOverflowReporter",
           "OverflowReportCallback"]

_LOGGER = logging.getLogger("boost_cells.diagnostics")

# The largest finite value of each floating-point dtype; reaching it in magnitude counts as "saturated".
_EXTREMES = MappingProxyType({
    mstype.float16: float(np.finfo(np.float16).max), mstype.bfloat16: 3.3895313892515355e38,
    mstype.float32: float(np.finfo(np.float32).max), mstype.float64: float(np.finfo(np.float64).max)})


@dataclass(frozen=True)
class OverflowRecord:
    """One cell whose output (forward) or emitted gradient (backward) has inf, nan or a value at its dtype's extremes.

    Attributes:
        name (str): the cell's name as its parameters are prefixed (``features.2``, ``classifier.fc1``: the names a
            checkpoint shows); for a cell whose parameters carry no prefix of their own, its attribute path; for the
            analysed network itself, its class name.
        path (str): the attribute path from the analysed network (``_backbone.features.2``; ``""`` for the network).
        type (str): the cell's class name.
        phase (str): ``"forward"`` or ``"backward"``.
        kind (str): ``"inf"``, ``"nan"`` or ``"saturated"`` (|x| reaches the dtype's largest finite value, 65504 for
            float16), of the first offending output tensor; inf wins over nan within one tensor.
        dtype (str), shape (tuple): of that first offending output tensor.
        input_dtype (str or None): dtype of the first floating-point input.
        input_min, input_max, output_min, output_max (float or None): over all floating-point inputs/outputs, NaN
            ignored (NaN when every value is NaN, None when there is no floating-point tensor).
    In the backward phase, the inputs are the gradient arriving at the cell's output and the outputs are the
    gradients it emits: with respect to its inputs and to its own trainable Parameters. As in a train step, no
    gradient is computed with respect to the network's own inputs.
    """
    name: str
    path: str
    type: str
    phase: str
    kind: str
    dtype: str
    shape: tuple
    input_dtype: object
    input_min: object
    input_max: object
    output_min: object
    output_max: object

    def to_dict(self):
        """A JSON-ready dict; non-finite numbers become the strings "inf", "-inf" and "nan"."""
        out = asdict(self)
        out["shape"] = list(self.shape)
        return {key: _json_number(value) for key, value in out.items()}


def _json_number(value):
    if isinstance(value, float) and not math.isfinite(value):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
    return value


def _format_number(value):
    return "-" if value is None else f"{value:.5g}"


class OverflowReport:
    """The result of ``locate_overflow``: the offending cells in execution order.

    Attributes:
        records (tuple[OverflowRecord]): forward records in the order the cells finished, then backward records in
            the order their gradients were computed; empty for a clean network (``len(report) == 0``).
        first (OverflowRecord or None): the first offender, ``records[0]``.
        sens (float): the backward pass's initial gradient (the loss scale).
        loss (float or None): the loss (None unless it has one element).
    """

    def __init__(self, records, sens, loss):
        self.records = tuple(records)
        self.sens = sens
        self.loss = loss

    @property
    def first(self):
        return self.records[0] if self.records else None

    def __len__(self):
        return len(self.records)

    def __iter__(self):
        return iter(self.records)

    def to_dict(self):
        return {"sens": _json_number(self.sens), "loss": _json_number(self.loss),
                "records": [record.to_dict() for record in self.records]}

    def to_json(self, indent=2):
        """Strict JSON (no NaN/Infinity literals): ``{"sens", "loss", "records": [...]}``."""
        return json.dumps(self.to_dict(), indent=indent, allow_nan=False)

    def __str__(self):
        head = f"overflow report (sens {self.sens:g}, loss {_format_number(self.loss)}): "
        if not self.records:
            return head + "no cell produced inf, nan or a value at its dtype's extremes."
        first = self.first
        lines = [head + f"{len(self.records)} record(s); first offender: '{first.name}' ({first.type}, "
                 f"{first.phase}, {first.kind})"]
        columns = ("#", "phase", "name", "type", "kind", "dtype", "shape", "in dtype", "in min", "in max", "out min",
                   "out max")
        rows = [[str(i), r.phase, r.name, r.type, r.kind, str(r.dtype), str(r.shape), str(r.input_dtype or "-"),
                 *(_format_number(v) for v in (r.input_min, r.input_max, r.output_min, r.output_max))]
                for i, r in enumerate(self.records, 1)]
        widths = [max(len(row[i]) for row in [columns, *rows]) for i in range(len(columns))]
        for row in [columns, *rows]:
            lines.append("  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip())
        lines[2] += "   <- first"
        return "\n".join(lines)

    def __repr__(self):
        return f"OverflowReport(records={len(self.records)}, first={self.first.name if self.first else None!r})"


def _float_tensors(value):
    """The floating-point Tensors in a value (a Tensor or nested tuples/lists), in order."""
    if isinstance(value, Tensor):
        if value.dtype in _EXTREMES:
            yield value
    elif isinstance(value, (tuple, list)):
        for item in value:
            yield from _float_tensors(item)


def _to_numpy(tensor):
    return (tensor.astype(mstype.float32) if tensor.dtype == mstype.bfloat16 else tensor).asnumpy()


def _kind(array, extreme):
    if np.isinf(array).any():
        return "inf"
    if np.isnan(array).any():
        return "nan"
    if array.size and np.nanmax(np.abs(array)) >= extreme:
        return "saturated"
    return None


class _Summary:
    """min/max (NaN ignored) over a value's floating-point tensors, and its first offending tensor, if any."""

    def __init__(self, value):
        tensors = list(_float_tensors(value))
        arrays = [_to_numpy(t) for t in tensors]
        self.dtype = str(tensors[0].dtype) if tensors else None
        self.shape = tuple(tensors[0].shape) if tensors else ()
        self.kind = None
        for tensor, array in zip(tensors, arrays):
            kind = _kind(array, _EXTREMES[tensor.dtype])
            if kind is not None:
                self.kind, self.dtype, self.shape = kind, str(tensor.dtype), tuple(tensor.shape)
                break
        flat = np.concatenate([a.ravel().astype(np.float64) for a in arrays]) if arrays else np.zeros(0)
        finite_or_inf = flat[~np.isnan(flat)]
        if not flat.size:
            self.minimum = self.maximum = None
        elif not finite_or_inf.size:
            self.minimum = self.maximum = math.nan
        else:
            self.minimum, self.maximum = float(finite_or_inf.min()), float(finite_or_inf.max())


def _named_cells(network):
    """(cell, name, path) for every distinct cell, depth first; see ``OverflowRecord`` for name and path."""
    found, seen = [], set()

    def walk(cell, prefix, path):
        if id(cell) in seen:
            return
        seen.add(id(cell))
        found.append((cell, prefix or path or type(cell).__name__, path))
        for attr, child in cell.name_cells().items():
            if child is not None:
                child_prefix = ".".join(filter(None, (prefix, attr))) if prefixes_child_names(cell) else prefix
                walk(child, child_prefix, ".".join(filter(None, (path, attr))))

    walk(network, "", "")
    return found


def _check_sens(sens):
    if isinstance(sens, Tensor) and sens.size == 1:
        sens = float(sens.astype(mstype.float32).asnumpy().reshape(-1)[0])
    if not complies("sens", sens):
        raise ValueError(f"For 'locate_overflow', 'sens' must be {allowed('sens')} or a one-element Tensor (the loss "
                         f"scale), but got {sens!r}.")
    return float(sens)


class _Recorder:
    """Cell hooks that keep what each cell saw; records are built after the backward pass."""

    def __init__(self, network):
        self.cells = _named_cells(network)
        self.forward, self.backward = [], []
        self._handles = []
        for cell, name, path in self.cells:
            self._handles.append(cell.register_forward_hook(self._forward_hook(cell, name, path)))
            self._handles.append(cell.register_backward_hook(self._backward_hook(cell, name, path)))

    def _forward_hook(self, cell, name, path):
        def hook(_cell, inputs, output):
            self.forward.append((cell, name, path, _Summary(inputs), _Summary(output)))
        return hook

    def _backward_hook(self, cell, name, path):
        def hook(_cell, grad_inputs, grad_output):
            self.backward.append((cell, name, path, grad_output, grad_inputs))
        return hook

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        for handle in self._handles:
            handle.remove()

    def records(self, weight_grads):
        """Forward then backward records; a cell's emitted gradients include its own Parameters' gradients."""
        records = [_record(cell, name, path, "forward", inputs, outputs)
                   for cell, name, path, inputs, outputs in self.forward]
        fired = {id(cell) for cell, *_ in self.backward}
        unfired = [(cell, name, path, None, ()) for cell, name, path in reversed(self.cells) if id(cell) not in fired]
        seen = set()
        for cell, name, path, arriving, emitted in [*self.backward, *unfired]:
            own = () if id(cell) in seen else tuple(weight_grads[id(p)] for _, p in
                                                    cell.parameters_and_names(expand=False) if id(p) in weight_grads)
            seen.add(id(cell))
            records.append(_record(cell, name, path, "backward", _Summary(arriving), _Summary((*emitted, *own))))
        return [record for record in records if record is not None]


def _record(cell, name, path, phase, inputs, outputs):
    if outputs.kind is None:
        return None
    return OverflowRecord(name=name, path=path, type=type(cell).__name__, phase=phase, kind=outputs.kind,
                          dtype=outputs.dtype, shape=outputs.shape, input_dtype=inputs.dtype,
                          input_min=inputs.minimum, input_max=inputs.maximum, output_min=outputs.minimum,
                          output_max=outputs.maximum)


def locate_overflow(network, *inputs, sens=1.0):
    """Run one forward and one backward pass of ``network`` on ``inputs`` and report every overflowing cell.

    The backward pass starts from ``sens`` (the loss scale) cast to the loss's dtype and computes the gradients of
    the trainable Parameters, as the loss-scaled train cells do (not those of the inputs: no step computes them).
    Works from GRAPH_MODE or PYNATIVE_MODE scripts: it switches to PYNATIVE_MODE and restores the mode.

    Args:
        network (Cell): the network with loss. inputs: its inputs (one batch).
        sens (float or Tensor): the backward pass's initial gradient, a finite number > 0; default 1.0.

    Returns:
        OverflowReport.

    Raises:
        TypeError: ``network`` is not a Cell. ValueError: ``sens`` is not a finite number > 0.
    """
    if not isinstance(network, nn.Cell):
        raise TypeError(f"For 'locate_overflow', 'network' must be a Cell (the network with loss), but got "
                        f"{type(network).__name__}.")
    sens = _check_sens(sens)
    weights = network.trainable_params()
    with _pynative_pass(network):
        with _Recorder(network) as recorder:
            loss, backward = ms.vjp(lambda: network(*inputs), weights=weights)
            _, grads = backward(ops.fill(loss.dtype, loss.shape, sens))
        weight_grads = {id(p): g for p, g in zip(weights, grads)}
        loss_value = float(_to_numpy(loss).reshape(-1)[0]) if isinstance(loss, Tensor) and loss.size == 1 else None
        return OverflowReport(recorder.records(weight_grads), sens, loss_value)


@contextlib.contextmanager
def _pynative_pass(network):
    """PYNATIVE_MODE (where cell hooks fire) for a forward and backward pass over ``network``; on the way out, even
    when the pass raises, what the pass changed is put back: the execution mode found on the way in, the values of
    ``network``'s non-trainable Parameters (BatchNorm statistics a forward pass updates), and after an exception the
    PyNative executor's grad state (a forward pass that raised under ``ms.vjp`` leaves its grad graph open, and every
    later PyNative grad step of the process would fail)."""
    mode = ms.get_context("mode")
    state = [(p, p.value().copy()) for p in network.get_parameters() if not p.requires_grad]
    ms.set_context(mode=ms.PYNATIVE_MODE)
    try:
        yield
    except BaseException:
        reset_pynative_executor()
        raise
    finally:
        for parameter, value in state:
            parameter.set_data(value)
        ms.set_context(mode=mode)


def _scale_of(train_cell):
    scale = getattr(train_cell, "scale_sense", None)
    if not isinstance(scale, Tensor):
        raise TypeError(f"For 'FirstOverflowReporter', the train cell must be loss-scaled (have a 'scale_sense' "
                        f"Tensor, as BoostTrainOneStepWithLossScaleCell), but got {type(train_cell).__name__}.")
    return float(scale.astype(mstype.float32).asnumpy().reshape(-1)[0])


class FirstOverflowReporter:
    """Host side: on the first overflowing step of a run, locate the overflow on that batch and loss scale.

    It reads the scale before each step (the cell returns the scale after its policy lowered it), and after the
    first step whose overflow flag is set it runs ``locate_overflow`` on the train cell's ``network`` and writes the
    report as JSON to ``path`` (``<stem>.rank<r><ext>`` in data-parallel mode, one file per rank); training goes
    on. After that it does nothing. The path is checked at construction (its directory is made); the report is
    written atomically (a temporary file renamed over ``path``).

    It is a host hook of the train cells (``boost_cells.host_hooks``: ``before_step(cell)``, ``after_step(cell,
    inputs, outputs)``: a cell compiled where no host code runs refuses it) and the worker of
    ``OverflowReportCallback``.

    Args:
        path (str or PathLike): where to write the report.
        source (object): what the report reads ``network`` and ``scale_sense`` of; default None: the train cell the
            hook runs on (a GAN cell names each pair's network and scale).
        pair (int): in a GAN cell's outputs ``(losses, overflows, scales)``, the index of this pair's flag;
            default None: the flag is ``outputs[1]``.
    Raises:
        TypeError: ``path`` is not a string or PathLike. ValueError: a path that cannot be written (a directory,
            a parent that is a file, a read-only place).
    """

    def __init__(self, path, source=None, pair=None):
        if not isinstance(path, (str, os.PathLike)):
            raise TypeError(f"For 'FirstOverflowReporter', 'overflow_report' must be a path string, but got "
                            f"{type(path).__name__}.")
        path = os.fspath(path)
        info = parallel_info()
        if info.distributed:
            stem, ext = os.path.splitext(path)
            path = f"{stem}.rank{info.rank}{ext}"
        # Checked now (directory made, a file can be created there): a bad path fails when the cell is built,
        # not on the first overflow, which may come at step 50,000.
        self.path = writable_path("FirstOverflowReporter", "overflow_report", path)
        self.source, self.pair = source, pair
        self.done = False
        self.report = None
        self._scale = None

    active = True  # a host hook that stays on for the whole run
    required = True  # without it, no report: the cell refuses to compile nested

    def _source(self, train_cell):
        return train_cell if self.source is None else self.source

    def take_step(self, train_cell, inputs):  # pylint: disable=unused-argument
        """None: the cell takes its own step."""
        return None

    def before_step(self, train_cell):
        if not self.done:
            self._scale = _scale_of(self._source(train_cell))

    def after_step(self, train_cell, inputs, outputs):
        """Locate and write the report if the step's overflow flag in ``outputs`` (the cell's ``(loss, overflow,
        scale)``) is set and no report was written yet."""
        overflow = outputs[1] if self.pair is None else outputs[1][self.pair]
        if self.done or not np.any(overflow.asnumpy()):
            return
        self.done = True
        self.report = locate_overflow(self._source(train_cell).network, *inputs, sens=self._scale)
        write_atomic(self.path, self.report.to_json())  # a reader never sees half a report
        _LOGGER.warning("First overflow of the run; report written to %s\n%s", self.path, self.report)


class OverflowReportCallback(Callback):
    """``Model.train`` callback: on the first overflowing step, write an overflow report to ``path``.

    Works with any ``Model`` whose train network is loss-scaled (returns ``(loss, overflow, scale)`` and has a
    ``scale_sense``), in non-sink mode (the report needs the step's batch).

    Args:
        path (str or PathLike): where to write the report (see ``FirstOverflowReporter``).
    Raises:
        TypeError: bad ``path``. ValueError: an unwritable ``path``; at train begin, ``dataset_sink_mode=True``.
    """

    def __init__(self, path):
        super().__init__()
        self.reporter = FirstOverflowReporter(path)

    def on_train_begin(self, run_context):
        if run_context.original_args().dataset_sink_mode:
            raise ValueError("For 'OverflowReportCallback', 'dataset_sink_mode' must be False (the report needs each "
                             "step's batch on the host), but got True.")

    def on_train_step_begin(self, run_context):
        self.reporter.before_step(run_context.original_args().train_network)

    def on_train_step_end(self, run_context):
        params = run_context.original_args()
        outputs = params.net_outputs
        if not isinstance(outputs, (tuple, list)) or len(outputs) != 3:
            raise ValueError("For 'OverflowReportCallback', the train network must return (loss, overflow, scale), "
                             f"but got {type(outputs).__name__}.")
        self.reporter.after_step(params.train_network, params.train_dataset_element, outputs)
