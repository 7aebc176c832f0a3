"""Launch multi-process jobs with msrun for the tests: a timeout on each, and the whole process group killed on
expiry, so a hung job fails its test instead of hanging the suite."""
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
OTHER_NODE = ROOT / "tests" / "distributed" / "msrun_other_node.py"

# How fast a job notices a dead worker. msrun sees a worker exit within 1 s and kills the others, then waits for
# its scheduler, which declares the dead node lost after MS_NODE_TIMEOUT seconds without a heartbeat (default 30)
# and then stops (a 5 s loop): about 35 s from a SIGKILL to msrun's exit by default, 8-15 s with 10. The same
# variable also bounds a CPU collective's wait for its peers unless MS_CPU_COMM_OP_TIMEOUT is set, so that one is
# kept at its default of 30 s (a rank may wait that long for a peer that is still compiling).
FAST_FAILURE_ENV = {"MS_NODE_TIMEOUT": "10", "MS_CPU_COMM_OP_TIMEOUT": "30"}


def free_port():
    """A free TCP port on loopback for msrun's scheduler."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_msrun(workers, args, log_dir, *, local_workers=None, node_rank=None, port=None, env=None,
                other_node=False):
    """Start ``msrun`` (``workers`` in all, ``local_workers`` of them here, default all) on ``args`` from the
    repository root, in a new process group; returns the Popen. ``node_rank``/``port`` for a multi-node launch
    (master 127.0.0.1); ``other_node`` runs msrun as a second machine would: on one machine both launches would
    otherwise take 127.0.0.1 for their own address and both start the scheduler."""
    bin_dir = os.path.dirname(sys.executable)
    full_env = {**os.environ, "PATH": bin_dir + os.pathsep + os.environ.get("PATH", ""), "PYTHONPATH": str(ROOT),
                "GLOG_v": "3", **(env or {})}
    launcher = [sys.executable, str(OTHER_NODE)] if other_node else [os.path.join(bin_dir, "msrun")]
    command = [*launcher, f"--worker_num={workers}", f"--local_worker_num={local_workers or workers}",
               "--master_addr=127.0.0.1", f"--master_port={port or free_port()}", "--join=True",
               f"--log_dir={log_dir}", *([f"--node_rank={node_rank}"] if node_rank is not None else []),
               *map(str, args)]
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=full_env,
                            cwd=ROOT, start_new_session=True)


def finish_msrun(process, args, log_dir, timeout):
    """Wait for a started msrun up to ``timeout`` s (then kill its process group and fail the test); returns
    (exit code, console output + worker logs)."""
    try:
        output, _ = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        output, _ = process.communicate()
        pytest.fail(f"msrun job {args} ran past {timeout} s and was killed:\n{output[-3000:]}")
    logs = "".join(p.read_text(errors="replace") for p in sorted(Path(log_dir).glob("worker_*.log")))
    return process.returncode, output + logs


def msrun(workers, args, log_dir, timeout, env=None):
    """Run ``msrun`` with ``workers`` local workers on ``args`` (script and its arguments), from the repository
    root with this interpreter's environment first on PATH; returns (exit code, console output + worker logs)."""
    return finish_msrun(start_msrun(workers, args, log_dir, env=env), args, log_dir, timeout)
