"""DimReduce data-parallel scenarios run by every rank of an msrun job; each writes ``<out>/<scenario>_rank<r>.npz``.

Usage (from tests/test_dim_reduce.py): ``msrun ... tests/distributed/dim_reduce_worker.py OUT_DIR CKPT_DIR``.
Rank r of n trains on rows ``[r*m, (r+1)*m)`` of each global batch (``worker.shard``), so a test can replay the
whole batch in one process.
"""
import os
import sys
import time

import numpy as np
from mindspore.communication import get_group_size

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from boost_cells import BoostTrainOneStepCell  # noqa: E402
from boost_cells.updates.dim_reduce import share_from_rank0  # noqa: E402
from tests.distributed.worker import train, weights  # noqa: E402
from tests.helpers import init_data_parallel, linear_setup  # noqa: E402

STEPS = 4
N_COMPONENTS = 4
SLOW_RANK_DELAY = 2.5  # seconds rank 1 sleeps before the all-reduce in the timeout scenario
SHORT_TIMEOUT = 1  # seconds rank 0 waits there


def dim_reduce_config(ckpt_dir):
    return {"boost": {"mode": "manual", "dim_reduce": True},
            "dim_reduce": {"weight_load_dir": ckpt_dir, "n_components": N_COMPONENTS, "timeout": 60}}


def scenario_train(rank, size, ckpt_dir):
    """STEPS DimReduce steps on this rank's shards; the weights and DimReduce's state afterwards."""
    net, net_with_loss, opt = linear_setup("momentum")
    cell = BoostTrainOneStepCell(net_with_loss, opt, boost_config=dim_reduce_config(ckpt_dir))
    train(cell, STEPS, rank, size)
    return {**weights(net), "pca": cell.update.pca.asnumpy(), "bk": cell.update.bk.asnumpy(),
            "sk": cell.update.sk.asnumpy()}


def scenario_timeout(rank, size, ckpt_dir):
    """Rank 1 reaches the PCA all-reduce late: rank 0, waiting at most SHORT_TIMEOUT s, must raise a clear error;
    rank 1 (timeout 60 s) then completes the all-reduce with rank 0's still-waiting helper thread."""
    matrix = np.full((2, 3), rank + 1.0, np.float32)
    if rank == 1:
        time.sleep(SLOW_RANK_DELAY)
    try:
        shared = share_from_rank0(matrix, rank, SHORT_TIMEOUT if rank == 0 else 60)
    except RuntimeError as error:
        return {"message": np.array(str(error))}
    return {"message": np.array("no error"), "shared": shared}


def main():
    out_dir, ckpt_dir = sys.argv[1], sys.argv[2]
    rank, size = init_data_parallel(), get_group_size()
    for name in ("train", "timeout"):
        result = globals()["scenario_" + name](rank, size, ckpt_dir)
        np.savez(os.path.join(out_dir, f"{name}_rank{rank}.npz"), **result)
        print(f"rank {rank}: scenario {name} done", flush=True)
    if rank == 0:
        time.sleep(SLOW_RANK_DELAY)  # let rank 1's late all-reduce meet rank 0's helper thread before exiting


if __name__ == "__main__":
    main()
