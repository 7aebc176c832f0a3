"""Kill and resume, end to end, through docs/reliability.md's own path: 2-worker msrun jobs of examples/train.py's
``train_with_model`` (``boost_cells.Model.train`` with ``ModelCheckpoint``, ``BoostMonitor``, the data sharding of
docs/data-parallel.md), relaunched with the resume recipe of docs/reliability.md (``load_checkpoint`` +
``Model.train(..., initial_epoch=)``).

Two jobs in all (a launch costs ~15-20 s). The first trains three cases one after another, each up to a chosen
step after its last checkpoint: two end there by an exception out of ``Model.train`` (the process goes on, as it must
to reach the next case; what was not checkpointed is lost, as in a crash), and the last, O0 with a dynamic loss
scale and accumulation over 4 micro-steps, is killed: rank 0 SIGKILLs itself mid-epoch and mid-cycle, after
writing half a monitor record. The second job resumes all three from their checkpoints, then runs each
uninterrupted as the reference: the resumed runs must end with every Parameter of the train cell (weights,
optimizer state, loss scale and counters, accumulation buffers and counter, freezing position, AdaSum's state)
bit-identical to the reference, and the resumed monitor log must equal the reference's, record for record.
DimReduce's state is resumed in-process (tests/test_dim_reduce.py::test_checkpoint_mid_run_resumes_identically).
"""
import json
import re
import time
from pathlib import Path

import numpy as np
import mindspore as ms
import pytest

from boost_cells.diagnostics import read_run
from tests.distributed.resume_worker import EPOCHS, KILL_RANK, MONITOR_INTERVAL, TRAIN_SAMPLES, BATCH_SIZE
from tests import figures
from tests.launch import FAST_FAILURE_ENV, finish_msrun, start_msrun

pytestmark = pytest.mark.slow  # every test reads the results of two 2-worker msrun jobs

WORKER = Path(__file__).resolve().parent / "distributed" / "resume_worker.py"
STEPS_PER_EPOCH = TRAIN_SAMPLES // (2 * BATCH_SIZE)
SCALE = {"type": "dynamic", "init": 65536.0, "window": 3, "hysteresis": 2, "max_scale": 1048576.0}
FREEZE = {"param_groups": 2, "freeze_type": 1, "freeze_p": 0.5, "total_steps": EPOCHS * STEPS_PER_EPOCH}
CASES = {
    # O0 with a dynamic loss scale and accumulation k=4: float16 LeNet (the example's --amp-level O2) under a scale
    # that overflows and moves; 6 steps per epoch, so the checkpoints fall mid-cycle
    "o0_accumulate4": {"level": "O0", "boost": {"mode": "manual", "grad_accumulation": True},
                       "grad_accumulation": {"grad_accumulation_step": 4}, "loss_scale": SCALE},
    # LessBN's head and centralization, interval freezing over LeNet's 2 layers (random, seeded schedule)
    "o1_freeze": {"level": "O1", "grad_freeze": FREEZE},
    # O1 plus AdaSum across the two workers (groups of one rank)
    "o2_adasum": {"level": "O2", "common": {"device_number": 1}, "grad_freeze": FREEZE},
}
# Global step (1-based) before which each case's first run ends (mid-epoch); the last is the SIGKILL, at micro-step
# 3 of the accumulation cycle of steps 9-12, and it resumes from step 6, 2 micro-steps into a cycle.
STOPS = {"o1_freeze": 10, "o2_adasum": 17, "o0_accumulate4": 11}
KILLED = "o0_accumulate4"
RECORD_KEYS = ("step", "steps", "loss", "loss_scale", "overflows", "overflow_steps", "skipped", "updates", "lr",
               "features")


@pytest.fixture(scope="module")
def jobs(tmp_path_factory):
    out = tmp_path_factory.mktemp("kill_resume")
    (out / "configs").mkdir()
    for case, config in CASES.items():
        (out / "configs" / f"{case}.json").write_text(json.dumps(config))
        (out / case).mkdir()
    first = [f"{case}:{'kill' if case == KILLED else 'first'}:{STOPS[case]}" for case in STOPS]
    args = [WORKER, out, *first]
    started = time.time()
    process = start_msrun(2, args, out / "logs_first", env=FAST_FAILURE_ENV)
    code, killed_output = finish_msrun(process, args, out / "logs_first", timeout=300)
    ended = time.time()
    print(f"\nfirst job: {ended - started:.1f} s")
    assert (out / "killed_at").exists(), killed_output[-5000:]
    seconds = ended - float((out / "killed_at").read_text())
    second = [f"{case}:resume" for case in CASES] + [f"{case}:reference" for case in CASES]
    args = [WORKER, out, *second]
    resume_code, output = finish_msrun(start_msrun(2, args, out / "logs_second"), args, out / "logs_second",
                                       timeout=400)
    print(f"second job: {time.time() - ended:.1f} s")
    assert resume_code == 0, output[-5000:]
    print(f"\nkill -> launcher exit: {seconds:.1f} s")
    return {"out": out, "code": code, "killed_output": killed_output, "seconds": seconds, "output": output}


def state(jobs, case, phase, rank):
    return dict(np.load(jobs["out"] / case / f"{phase}_rank{rank}.npz"))


def test_a_killed_worker_ends_the_job_promptly_with_the_cause_named(jobs):
    """msrun names the dead worker and its signal (-9: SIGKILL) and stops the other one; with
    FAST_FAILURE_ENV (MS_NODE_TIMEOUT=10) the launcher exits within 30 s of the kill (measured 8-15 s)."""
    assert jobs["code"] != 0
    assert re.search(r"Worker process \d+ exit with exception\. Error code: -9", jobs["killed_output"])
    assert f"rank {KILL_RANK}: SIGKILL before step {STOPS[KILLED]}" in jobs["killed_output"]
    assert jobs["seconds"] < 30, jobs["seconds"]
    figures.note("kill and resume: seconds from the SIGKILL to the launcher's exit (MS_NODE_TIMEOUT=10)",
                 f"{jobs['seconds']:.1f}")


@pytest.mark.parametrize("case", sorted(CASES))
def test_resumed_run_ends_bit_identical_to_the_uninterrupted_one(jobs, case):
    epoch = (STOPS[case] - 1) // STEPS_PER_EPOCH
    assert f"rank 0 {case} resume: resuming from " in jobs["output"]
    assert f"(epoch {epoch})" in jobs["output"]
    for rank in range(2):
        resumed, reference = state(jobs, case, "resume", rank), state(jobs, case, "reference", rank)
        assert sorted(resumed) == sorted(reference)
        for name, value in reference.items():
            np.testing.assert_array_equal(resumed[name], value, err_msg=f"{case} rank {rank} {name}")
        figures.add("kill and resume: Parameters bit-identical to the uninterrupted run (all cases, both ranks)",
                    len(reference))


@pytest.mark.parametrize("case", sorted(CASES))
def test_replicas_stay_bit_identical(jobs, case):
    """Every Parameter on both ranks but two kinds of per-rank state, by design: with AdaSum the optimizer state
    follows each group's own gradients (as in Horovod), and accumulation buffers hold each rank's own gradient sum
    until the cycle's last micro-step reduces it."""
    first, second = state(jobs, case, "resume", 0), state(jobs, case, "resume", 1)
    for name, value in first.items():
        if case == "o2_adasum" and name.startswith(("moments.", "adasum.old.")):
            continue
        if name.startswith("grad_accumulation.") and name != "grad_accumulation.accumulation_step":
            continue
        np.testing.assert_array_equal(second[name], value, err_msg=f"{case} {name}")


def newest_checkpoint_before(jobs, case, rank):
    """The checkpoint the relaunch resumed from: the last one the first run wrote (epoch of STOPS)."""
    epoch = (STOPS[case] - 1) // STEPS_PER_EPOCH
    path = jobs["out"] / case / "ckpt" / f"rank{rank}" / f"boost-{epoch}_{STEPS_PER_EPOCH}.ckpt"
    return {name: value.asnumpy() for name, value in ms.load_checkpoint(str(path), crc_check=True).items()}


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_checkpoint_holds_every_parameter_and_the_state_was_in_flight(jobs, case):
    """The checkpoint the run resumed from holds every Parameter of the train cell, and the boost state in it was
    mid-way (so the resume had something to restore): a moved loss scale and its counters, a part-filled
    accumulation buffer, a freezing position inside the schedule."""
    saved = newest_checkpoint_before(jobs, case, 0)
    assert int(saved.pop("epoch_num")) == (STOPS[case] - 1) // STEPS_PER_EPOCH
    assert sorted(saved) == sorted(state(jobs, case, "resume", 0))
    if "loss_scale" in CASES[case]:
        assert float(saved["scale_sense"]) != SCALE["init"]
    if case == KILLED:
        assert int(saved["grad_accumulation.accumulation_step"]) == STEPS_PER_EPOCH % 4
        assert any(np.any(value) for name, value in saved.items() if name.startswith("grad_accumulation.features"))
    if "grad_freeze" in CASES[case]:
        assert 0 < int(saved["grad_freeze.position"]) < FREEZE["total_steps"]


@pytest.mark.parametrize("case", sorted(CASES))
def test_monitor_log_of_the_resumed_run_equals_the_uninterrupted_one(jobs, case):
    """The relaunch dropped the records logged after the checkpoint (and, for the killed run, the torn last line)
    and continued from the checkpoint's step: the log reads as the reference's, nothing lost, nothing doubled."""
    log = jobs["out"] / case / "run.jsonl"
    if case == KILLED:
        assert "step" in log.read_text()
    resumed, reference = read_run(log), read_run(jobs["out"] / case / "reference.jsonl")
    assert [r["step"] for r in reference] == list(range(MONITOR_INTERVAL, EPOCHS * STEPS_PER_EPOCH + 1,
                                                        MONITOR_INTERVAL))
    assert [{key: r[key] for key in RECORD_KEYS} for r in resumed] == \
        [{key: r[key] for key in RECORD_KEYS} for r in reference]
    figures.add("kill and resume: monitor records equal to the uninterrupted run's (none lost)", len(reference))
    if "loss_scale" in CASES[case]:
        assert sum(r["overflows"] for r in reference) > 0
