"""``BoostMonitor``: what loss scaling, accumulation and freezing are doing while a run trains.

Every ``interval`` steps it reports, as NVIDIA's tflib optimizer does, the mean loss, the loss scale and its log2,
overflows and skipped steps (count and frequency), the learning rate, samples per second and the state of the
features that are on, as one printed line and, given a ``path``, one JSON object per line (JSON Lines).

It costs the step nothing on the device: per step it only keeps the tensors the train cell returned; they are read
once per interval, together with the learning rate and feature-state Parameters, so there is no extra device
round trip per step and no per-step sync that would stall an asynchronous device queue.

The log survives a crash and follows a resumed run (see ``BoostMonitor``): records are appended one whole line per
``write`` call, a torn last line (a write cut by a power loss) is dropped when the log is opened again, and a run
resumed from a checkpoint drops the records logged after the checkpoint's step, since those steps run again.
"""
import json
import math
import os
import time
import warnings

import numpy as np
from mindspore import Tensor, nn
from mindspore.train import Callback

from ..rules import check
from ..files import append_line, open_append, write_atomic, writable_path

__all__ = ["BoostMonitor", "format_record", "read_run"]


def _scalar(tensor):
    return float(tensor.asnumpy().reshape(-1)[0])


def _state_parts(cell):
    """The sub-cells of ``cell`` (itself included) that report feature state: those with ``monitor_state()``."""
    return [part for _, part in cell.cells_and_names() if callable(getattr(part, "monitor_state", None))]


def _learning_rate(optimizer):
    """The learning rate of the optimizer's last step: a float, or a list with one per parameter group."""
    rates = optimizer.learning_rate if optimizer.is_group_lr else [optimizer.learning_rate]
    step = max(int(optimizer.global_step.asnumpy().reshape(-1)[0]) - 1, 0)
    values = []
    for rate in rates:
        if isinstance(rate, nn.Cell):  # a schedule or a per-step list, indexed by the global step
            rate = rate(Tensor(np.array([step], np.int32)))
        values.append(_scalar(rate))
    return values if optimizer.is_group_lr else values[0]


def _parse_log(path):
    """``(records, torn, data)`` of the JSON Lines log at ``path``: ``records`` are ``(step, line)`` for each
    complete record in order; ``torn`` counts the unreadable lines after the last good record (a line cut short by a
    crash, possibly with something written after it), which are dropped; ``data`` is the file's bytes.

    Raises:
        ValueError: an unreadable line followed by good records (the file is damaged in the middle, or is not a
            BoostMonitor log), naming the file and the line.
    """
    with open(path, "rb") as handle:
        data = handle.read()
    records, bad = [], []
    for number, raw in enumerate(data.split(b"\n"), start=1):
        if not raw.strip():
            continue
        try:
            record = json.loads(raw.decode("utf-8"))
            step = record["step"]
            if isinstance(step, bool) or not isinstance(step, int):
                raise TypeError("'step' is not an int")
        except (ValueError, KeyError, TypeError) as error:
            bad.append((number, error))
            continue
        if bad:
            number, error = bad[0]
            raise ValueError(f"For 'BoostMonitor', the log '{path}' cannot be read: line {number} is not a "
                             f"BoostMonitor record ({error}) but records follow it. Repair or move the file.")
        records.append((step, raw.decode("utf-8")))
    return records, len(bad), data


class BoostMonitor(Callback):
    """Report loss, loss scale, overflows, learning rate, throughput and feature state every ``interval`` steps.

    Use it as a ``Callback`` of ``Model.train(..., callbacks=[BoostMonitor(...)])`` (the train network and batch
    size come from the run), or in a hand-written loop: ``monitor.record(cell(x, y), batch_size)`` after each
    call of the train cell, and ``monitor.close()`` at the end (also a context manager).

    Per interval (a JSON object with these keys):
        step (int): steps recorded so far, counting the steps of earlier runs appended to the same ``path``;
        steps (int): steps in this interval; loss (float): their mean loss;
        loss_scale, loss_scale_log2 (float or None): the scale after the interval's last step (None for a cell
            without loss scaling);
        overflows (int), overflow_rate (float): steps whose gradients were not finite, and their share;
        skipped (int), skip_rate (float): steps that changed no weight. boost_cells' loss-scaled cells skip
            exactly the overflowing steps (with accumulation: the micro-batch never reaches the buffer);
        overflow_steps (list of int): the step numbers that overflowed (for plots);
        updates (int or None): optimizer updates in the interval (the optimizer's ``global_step`` moved by this;
            fewer than ``steps`` under accumulation or skipping; counts every cell on a shared optimizer);
        lr (float, list or None): learning rate of the last step (a list with per-group rates);
        samples_per_s (float): samples of the interval over its wall time (the first interval includes
            compilation);
        features (dict): feature state, merged from every part of the cell that has a ``monitor_state()``
            method (the protocol: a host-side method returning ``{name: number}``, called once per interval),
            e.g. ``{"accumulation_step": 2}`` (micro-steps done in the current cycle) or ``{"freeze_group": 3}``
            (the first layer group the next step trains); empty when no feature reports.
        decisions (list of dict): the train cell's freezing decisions (``decisions``) made since the last record,
            each a ``Decision.to_dict()`` with its one-line reading under "line" (printed under the record's line).

    Records end on multiples of ``interval`` (``step`` 10, 20, ... for ``interval`` 10), also after a resume, so a
    resumed log lines up with an uninterrupted one; ``close()`` reports a last partial interval.

    The printed line shows the same numbers. The outputs a cell returns are its loss or ``(loss, overflow,
    loss_scale)``; outputs of ``nn.TrainOneStepWithLossScaleCell`` work alike.

    Args:
        interval (int): steps per report, >= 1. path (str or None): JSON Lines file, appended to; it is opened
            (its directory made) at construction, so an unwritable path fails here. train_cell (Cell or None): the
            cell whose optimizer and feature state are read; a Callback takes the run's train network.
        print_fn (callable or None): called with each line; default ``print``; None prints nothing.
        resume_step (int or None): the step the run continues from (a hand-written loop resumed from a
            checkpoint taken after that many steps): records logged after it are dropped from ``path`` and the
            step count continues from it. None: as a ``Model.train`` callback, the run's own position
            (``initial_epoch`` times the steps per epoch: 0 for a fresh run, so a fresh run replaces an old log at
            the same path); in a hand-written loop, the last record's step.

    Resuming (what happens to an existing log): a torn last line is dropped; records whose step is after the
    resume point are dropped (they describe steps that run again, and a record straddling the point goes with
    them), with a ``UserWarning`` saying how many; the file is rewritten atomically. Pick an ``interval`` that
    divides the checkpoint period and the resumed log equals an uninterrupted run's record for record.

    Raises:
        ValueError: ``interval`` not an int >= 1, ``resume_step`` not None or an int >= 0, an unwritable
            ``path``, a log damaged before its last line, or a ``batch_size`` not an int >= 1 in ``record``.
        TypeError: ``train_cell`` not a Cell, or outputs that are neither a Tensor nor a tuple of 1 or 3.
    """

    def __init__(self, interval=100, path=None, train_cell=None, print_fn=print, *, resume_step=None):
        super().__init__()
        check("BoostMonitor", "interval", interval)
        if resume_step is not None and (isinstance(resume_step, bool) or not isinstance(resume_step, int)
                                        or resume_step < 0):
            raise ValueError(f"For 'BoostMonitor', 'resume_step' must be None or an int >= 0, but got "
                             f"{resume_step!r}.")
        self.interval = interval
        self.path = None if path is None else writable_path("BoostMonitor", "path", path)
        self.print_fn = print_fn
        self.resume_step = resume_step
        self._file = None
        self.step = 0
        if self.path is not None:
            self._file = open_append(self.path)  # fails here, at construction, when the path is unwritable
            records, _ = self._rewind(resume_step)
            self.step = resume_step if resume_step is not None else (records[-1][0] if records else 0)
        self._positioned = resume_step is not None
        self._pending = []
        self._samples = 0
        self._started = time.perf_counter()
        self._optimizer = None
        self._state_parts = []
        self._train_cell = None
        self._decisions_reported = set()  # the decision lines already in a record
        self._global_step = None
        if train_cell is not None:
            self.bind(train_cell)

    def _rewind(self, position):
        """Drop a torn last line and, if ``position`` is not None, the records after step ``position``; rewrite the
        log atomically when anything was dropped. Returns ``(kept records, dropped record count)``."""
        records, _, data = _parse_log(self.path)
        kept = records
        if position is not None:
            kept = []
            for step, line in records:
                if step > position:
                    break
                kept.append((step, line))
        dropped = len(records) - len(kept)
        text = "".join(line + "\n" for _, line in kept)
        if text.encode("utf-8") != data:  # torn or blank lines, a last line without its newline, dropped records
            write_atomic(self.path, text)
            if self._file is not None:  # the old descriptor points at the replaced file
                os.close(self._file)
                self._file = open_append(self.path)
        if dropped:
            warnings.warn(f"For 'BoostMonitor', the run resumes after step {position}: dropped {dropped} record(s) "
                          f"of steps {records[len(kept)][0]}..{records[-1][0]} from '{self.path}' (those steps run "
                          "again).", UserWarning, stacklevel=3)
        return kept, dropped

    def continue_from(self, step):
        """Continue the step count from ``step`` (a resumed run's position), dropping the logged records after it.

        A ``Model.train`` callback does this itself on its first epoch; call it in a hand-written loop that
        learns its position after building the monitor (or pass ``resume_step``)."""
        if isinstance(step, bool) or not isinstance(step, int) or step < 0:
            raise ValueError(f"For 'BoostMonitor.continue_from', 'step' must be an int >= 0, but got {step!r}.")
        if self._pending:
            raise ValueError("For 'BoostMonitor.continue_from', call it before recording steps, but "
                             f"{len(self._pending)} step(s) are pending.")
        if self.path is not None:
            self._rewind(step)
        self.step = step
        self._positioned = True

    def bind(self, train_cell):
        """Read the learning rate and feature state from ``train_cell`` (found once, read once per interval)."""
        if not isinstance(train_cell, nn.Cell):
            raise TypeError(f"For 'BoostMonitor', 'train_cell' must be a Cell, but got {type(train_cell).__name__}.")
        optimizer = getattr(train_cell, "optimizer", None)
        while optimizer is not None and not isinstance(optimizer, nn.Optimizer):
            optimizer = getattr(optimizer, "optimizer", None)  # a wrapper (FreezeOpt) holds the real one
        self._optimizer = optimizer
        self._state_parts = _state_parts(train_cell)
        self._train_cell = train_cell
        self._global_step = self._read_global_step()

    def _read_global_step(self):
        return None if self._optimizer is None else int(self._optimizer.global_step.asnumpy().reshape(-1)[0])

    def record(self, outputs, batch_size):
        """Note one step: ``outputs`` as the train cell returned them, ``batch_size`` samples (on this rank).

        Returns the interval's record when this step completes an interval, else None.
        """
        check("BoostMonitor.record", "batch_size", batch_size)
        if isinstance(outputs, (tuple, list)) and len(outputs) in (1, 3):
            outputs = tuple(outputs)
        elif isinstance(outputs, Tensor):
            outputs = (outputs,)
        else:
            raise TypeError("For 'BoostMonitor.record', 'outputs' must be the loss Tensor or the tuple (loss, "
                            f"overflow, loss_scale) a train cell returns, but got {outputs!r}.")
        self._pending.append(outputs)
        self._samples += batch_size
        return self.report() if (self.step + len(self._pending)) % self.interval == 0 else None

    def _new_decisions(self):
        """The train cell's freezing decisions (its ``decisions``) not yet in a record: each as its ``to_dict()`` with
        its ``line()`` under "line"."""
        new = [decision for decision in getattr(self._train_cell, "decisions", ())
               if decision.line() not in self._decisions_reported]
        self._decisions_reported.update(decision.line() for decision in new)
        return [{**decision.to_dict(), "line": decision.line()} for decision in new]

    def report(self):
        """Report the steps recorded since the last report (nothing when there are none); returns the record."""
        if not self._pending:
            return None
        elapsed = time.perf_counter() - self._started
        first = self.step + 1
        self.step += len(self._pending)
        losses = [_scalar(out[0]) for out in self._pending]
        flags = [len(out) == 3 and bool(_scalar(out[1])) for out in self._pending]
        scale = _scalar(self._pending[-1][2]) if len(self._pending[-1]) == 3 else None
        steps, overflows = len(self._pending), sum(flags)
        global_step = self._read_global_step()
        record = {
            "step": self.step, "steps": steps, "loss": float(np.mean(losses)),
            "loss_scale": scale, "loss_scale_log2": None if scale is None else math.log2(scale),
            "overflows": overflows, "overflow_rate": overflows / steps,
            "skipped": overflows, "skip_rate": overflows / steps,
            "overflow_steps": [first + i for i, flag in enumerate(flags) if flag],
            "updates": None if global_step is None else global_step - self._global_step,
            "lr": None if self._optimizer is None else _learning_rate(self._optimizer),
            "samples_per_s": self._samples / elapsed if elapsed > 0 else None,
            "features": {},
        }
        for part in self._state_parts:
            record["features"].update(part.monitor_state())
        record["decisions"] = self._new_decisions()
        self._global_step = global_step
        self._pending, self._samples, self._started = [], 0, time.perf_counter()
        self._emit(record)
        return record

    def _emit(self, record):
        if self.print_fn is not None:
            self.print_fn(format_record(record))
        if self.path is not None:
            if self._file is None:
                self._file = open_append(self.path)
            append_line(self._file, json.dumps(record))

    def close(self):
        """Report a last partial interval and close the log file."""
        self.report()
        if self._file is not None:
            os.close(self._file)
            self._file = None

    def __del__(self):
        if getattr(self, "_file", None) is not None:
            os.close(self._file)
            self._file = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def on_train_begin(self, run_context):
        """Take the train network from the run and start the clock.

        Raises:
            ValueError: the run sinks the dataset (GPU/Ascend ``dataset_sink_mode=True``): a sink returns only its
                last step's outputs, so the overflows of the other steps could not be counted.
        """
        params = run_context.original_args()
        if getattr(params, "dataset_sink_mode", False):
            raise ValueError("For 'BoostMonitor', 'dataset_sink_mode' must be False, but got True: a sink returns "
                             "only its last step's outputs, so the other steps' losses and overflows cannot be "
                             "counted. Call Model.train(..., dataset_sink_mode=False).")
        self.bind(params.train_network)
        self._started = time.perf_counter()
        self._positioned = self.resume_step is not None

    def on_train_epoch_begin(self, run_context):
        """On the run's first epoch, continue from its position: ``initial_epoch`` times the steps per epoch
        (unless ``resume_step`` was given)."""
        if self._positioned:
            return
        params = run_context.original_args()
        self.continue_from((params.cur_epoch_num - 1) * params.batch_num)

    def on_train_step_end(self, run_context):
        """Record the step's outputs, with the dataset's batch size."""
        params = run_context.original_args()
        self.record(params.net_outputs, params.train_dataset.get_batch_size())

    def on_train_end(self, run_context):
        """Report the last partial interval and close the log file."""
        self.close()


def format_record(record):
    """One line for a person: the interval's numbers, feature state where on."""
    parts = [f"step {record['step']}", f"loss {record['loss']:.5g}"]
    if record["loss_scale"] is not None:
        parts.append(f"scale {record['loss_scale']:.6g} (log2 {record['loss_scale_log2']:.4f})")
        parts.append(f"overflows {record['overflows']}/{record['steps']} ({100 * record['overflow_rate']:.1f}%)")
        parts.append(f"skipped {record['skipped']}")
    if record["updates"] is not None:
        parts.append(f"updates {record['updates']}")
    if record["lr"] is not None:
        rates = record["lr"] if isinstance(record["lr"], list) else [record["lr"]]
        parts.append("lr " + ",".join(f"{rate:.4g}" for rate in rates))
    if record["samples_per_s"] is not None:
        parts.append(f"{record['samples_per_s']:.1f} samples/s")
    parts.extend(f"{key.replace('_', ' ')} {value}" for key, value in record["features"].items())
    decided = [decision["line"] for decision in record.get("decisions", ())]
    return "  ".join(parts) + "".join(f"\n  decided at {line}" for line in decided)


def read_run(path):
    """The records of a JSON Lines run log, in order; a torn last line (a crash mid-write) is left out.

    Raises:
        ValueError: a line that is not a record followed by records, naming the file and the line.
    """
    return [json.loads(line) for _, line in _parse_log(os.fspath(path))[0]]
