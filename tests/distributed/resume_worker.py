"""Kill-and-resume runs through docs/reliability.md's own path, for an msrun job: examples/train.py's
``train_with_model`` (``boost_cells.Model.train`` with ``ModelCheckpoint``, ``BoostMonitor``, the data sharding of
docs/data-parallel.md and the resume recipe of docs/reliability.md), several runs one after another in one job.

Usage (from tests/test_kill_resume.py): ``msrun ... tests/distributed/resume_worker.py OUT_DIR RUN [RUN...]`` with
each RUN ``CASE:PHASE[:STEP]``:

- ``CASE:first:STEP`` trains CASE from scratch with checkpoints in ``OUT/CASE/ckpt`` and stops before global step
  STEP: the run raises out of ``Model.train`` (its state after the last checkpoint is lost, as in a crash) and the
  job goes on with the next run;
- ``CASE:kill:STEP`` the same, but rank ``KILL_RANK`` SIGKILLs itself before step STEP, after writing the time to
  ``OUT/killed_at`` and (rank 0 writes the monitor log) half a record to the log, as a worker killed in the middle
  of a write leaves it; the job ends there;
- ``CASE:resume`` relaunches CASE from the newest checkpoint in ``OUT/CASE/ckpt`` (``--resume``) to the end;
- ``CASE:reference`` trains CASE uninterrupted, with its own checkpoints and log.

``resume`` and ``reference`` write every Parameter of the train cell at the end to
``OUT/CASE/<phase>_rank<r>.npz``. The cases' configs are ``OUT/configs/<CASE>.json`` (written by the test).
"""
import os
import signal
import sys
import time
from types import SimpleNamespace

import numpy as np
import mindspore as ms
from mindspore.communication import get_group_size, get_rank, init
from mindspore.train import Callback

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "examples"))

import train as example  # noqa: E402  (examples/train.py)

EPOCHS = 3
BATCH_SIZE = 16          # rows per rank per step
TRAIN_SAMPLES = 192      # 6 global batches of 32: 6 steps per epoch (a checkpoint after each), 18 in all
MONITOR_INTERVAL = 3     # divides the checkpoint period, so a resumed log lines up record for record
KILL_RANK = 0            # the rank that writes the monitor log, so its torn last line is the one resumed
AMP = {"o0_accumulate4": "O2"}   # float16: the loss scale overflows and moves


class Stop(Exception):
    """Ends a ``first`` run before its step, as a crash would."""


class StopBefore(Callback):
    """Before global step ``step`` (1-based): raise ``Stop``, or (``kill``) SIGKILL this process on KILL_RANK."""

    def __init__(self, step, kill, rank, out, monitor_path):
        super().__init__()
        self.step, self.kill, self.rank, self.out, self.monitor_path = step, kill, rank, out, monitor_path

    def on_train_step_begin(self, run_context):
        step = run_context.original_args().cur_step_num  # a fresh run's: the global step, 1-based
        if step != self.step:
            return
        if not self.kill:
            raise Stop(f"stopped before step {step}")
        if self.rank != KILL_RANK:
            return  # the other rank goes on into the step and waits for the dead one in the all-reduce
        if self.rank == 0:
            with open(self.monitor_path, "a", encoding="utf-8") as log:
                log.write('{"step": 15, "steps": 5, "loss": 0.12')  # half a record, no newline
        with open(os.path.join(self.out, "killed_at.tmp"), "w", encoding="utf-8") as stamp:
            stamp.write(repr(time.time()))
        os.replace(os.path.join(self.out, "killed_at.tmp"), os.path.join(self.out, "killed_at"))
        print(f"rank {self.rank}: SIGKILL before step {step}", flush=True)
        os.kill(os.getpid(), signal.SIGKILL)


def args_for(out, case, phase):
    directory = os.path.join(out, case)
    return SimpleNamespace(
        config=os.path.join(out, "configs", f"{case}.json"), epochs=EPOCHS, batch_size=BATCH_SIZE, lr=0.05,
        network="lenet", seed=0, amp_level=AMP.get(case, "O0"), monitor_interval=MONITOR_INTERVAL,
        train_samples=TRAIN_SAMPLES, min_accuracy=0.0,
        checkpoint_dir=os.path.join(directory, "reference_ckpt" if phase == "reference" else "ckpt"),
        monitor=os.path.join(directory, "reference.jsonl" if phase == "reference" else "run.jsonl"),
        resume=phase == "resume")


def run(out, spec, rank, size):
    case, phase, *step = spec.split(":")
    args = args_for(out, case, phase)
    callbacks = []
    if phase in ("first", "kill"):
        callbacks.append(StopBefore(int(step[0]), phase == "kill", rank, out, args.monitor))

    def log(message):
        print(f"rank {rank} {case} {phase}: {message}", flush=True)

    start = time.perf_counter()
    try:
        _, model = example.train_with_model(args, rank, size, log, callbacks, evaluate=False)
    except Stop as stop:
        log(f"{stop} after {time.perf_counter() - start:.1f} s")
        return
    state = {param.name: param.asnumpy() for _, param in model.train_network.parameters_and_names()}
    np.savez(os.path.join(out, case, f"{phase}_rank{rank}.npz"), **state)
    log(f"done in {time.perf_counter() - start:.1f} s")


def main():
    out, specs = sys.argv[1], sys.argv[2:]
    ms.set_context(mode=ms.GRAPH_MODE, device_target="CPU")
    ms.set_seed(0)
    init()
    ms.set_auto_parallel_context(parallel_mode=ms.ParallelMode.DATA_PARALLEL, gradients_mean=True)
    rank, size = get_rank(), get_group_size()
    for spec in specs:
        run(out, spec, rank, size)


if __name__ == "__main__":
    main()
