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


def free_port():
    """A free TCP port on loopback for msrun's scheduler."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def msrun(workers, args, log_dir, timeout):
    """Run ``msrun`` with ``workers`` local workers on ``args`` (script and its arguments), from the repository
    root with this interpreter's environment first on PATH; returns (exit code, console output + worker logs)."""
    bin_dir = os.path.dirname(sys.executable)
    env = {**os.environ, "PATH": bin_dir + os.pathsep + os.environ.get("PATH", ""), "PYTHONPATH": str(ROOT),
           "GLOG_v": "3"}
    command = [os.path.join(bin_dir, "msrun"), f"--worker_num={workers}", f"--local_worker_num={workers}",
               f"--master_port={free_port()}", "--join=True", f"--log_dir={log_dir}", *map(str, args)]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                               cwd=ROOT, start_new_session=True)
    try:
        output, _ = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        output, _ = process.communicate()
        pytest.fail(f"msrun job {args} ran past {timeout} s and was killed:\n{output[-3000:]}")
    logs = "".join(p.read_text(errors="replace") for p in sorted(Path(log_dir).glob("worker_*.log")))
    return process.returncode, output + logs
