"""Relaunch a benchmark script under ``msrun`` with 2 local workers on loopback, for its data-parallel part."""
import os
import socket
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def relaunch(script, worker_args, log_name, timeout):
    """Run ``script --as-msrun-worker *worker_args`` under ``msrun --worker_num=2`` on a free port, from the
    repository root with this interpreter first on PATH, and wait up to ``timeout`` seconds.

    Returns ``(exit code, lines of rank 0's log)``; the logs stay in ``/tmp/boost_cells_bench_<log_name>_<port>``.
    """
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    bin_dir = os.path.dirname(sys.executable)
    env = {**os.environ, "PATH": bin_dir + os.pathsep + os.environ.get("PATH", ""), "PYTHONPATH": ROOT,
           "GLOG_v": "3"}
    log_dir = os.path.join("/tmp", f"boost_cells_bench_{log_name}_{port}")
    command = [os.path.join(bin_dir, "msrun"), "--worker_num=2", "--local_worker_num=2", f"--master_port={port}",
               "--join=True", f"--log_dir={log_dir}", os.path.abspath(script), "--as-msrun-worker", *worker_args]
    code = subprocess.call(command, env=env, cwd=ROOT, timeout=timeout, stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL)
    with open(os.path.join(log_dir, "worker_0.log"), encoding="utf-8", errors="replace") as handle:
        return code, handle.readlines()


def run_reporting_part(script, worker_args, log_name, timeout):
    """``relaunch`` the script's data-parallel part and print what rank 0 reported: its lines that start with
    ``"bench: "``, without that prefix, leaving out the ``"bench: json"`` record. Returns msrun's exit code (and says
    on stderr when it is not 0)."""
    code, lines = relaunch(script, worker_args, log_name, timeout)
    print("\n".join(line[len("bench: "):].rstrip("\n") for line in lines
                    if line.startswith("bench: ") and not line.startswith("bench: json")), flush=True)
    if code:
        print(f"the msrun part failed with exit code {code}", file=sys.stderr)
    return code


def join_data_parallel():
    """In an msrun worker: join the collective group, switch to DATA_PARALLEL with mean gradients; returns
    ``(rank, rank count)``."""
    import mindspore as ms  # pylint: disable=import-outside-toplevel
    from mindspore.communication import get_group_size, get_rank, init  # pylint: disable=import-outside-toplevel
    init()
    ms.set_auto_parallel_context(parallel_mode=ms.ParallelMode.DATA_PARALLEL, gradients_mean=True)
    return get_rank(), get_group_size()
