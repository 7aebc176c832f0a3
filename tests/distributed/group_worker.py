"""Group loss scaling in data-parallel mode, run by every rank of an msrun job (tests/test_group_loss_scale.py).

Usage: ``msrun ... tests/distributed/group_worker.py OUT_DIR``; writes ``<OUT_DIR>/group_rank<r>.npz``. Rank r of
n trains on rows ``[r*ROWS, (r+1)*ROWS)`` of each global batch; ``PLANTED`` poisons one group on one rank.
"""
import os
import sys

import numpy as np
import mindspore as ms
from mindspore import Tensor, nn
from mindspore.common import dtype as mstype
from mindspore.communication import get_group_size, get_rank, init

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from boost_cells import BoostTrainOneStepWithLossScaleCell, GroupLossScaleManager  # noqa: E402
from tests.group_net import TwoGroupNet, WithMSE  # noqa: E402

ROWS = 3
STEPS = 4
PLANTED = {(1, 1): 2, (2, 0): 1}  # (step, rank) -> the group whose gradient gets an inf


def global_batch(step, size):
    rng = np.random.RandomState(step)
    return rng.randn(ROWS * size, 4).astype(np.float32), rng.randn(ROWS * size, 3).astype(np.float32)


def main():
    ms.set_context(mode=ms.GRAPH_MODE, device_target="CPU")
    init()
    ms.set_auto_parallel_context(parallel_mode=ms.ParallelMode.DATA_PARALLEL, gradients_mean=True)
    rank, size = get_rank(), get_group_size()
    manager = GroupLossScaleManager([64.0, 16.0], [], scale_window=2)
    net = TwoGroupNet(manager)
    manager.loss_scale_groups = net.groups()
    cell = BoostTrainOneStepWithLossScaleCell(WithMSE(net), nn.SGD(net.trainable_params(), 0.1), manager,
                                              boost_config={"boost": {"mode": "manual", "loss_scale_group": True}})
    overflows, scales = [], []
    for step in range(STEPS):
        x, y = global_batch(step, size)
        rows = slice(rank * ROWS, (rank + 1) * ROWS)
        poisoned = PLANTED.get((step, rank))
        f1, f2 = (Tensor(np.inf if poisoned == group else 1.0, mstype.float32) for group in (1, 2))
        _, overflow, _ = cell(Tensor(x[rows]), Tensor(y[rows]), f1, f2)
        overflows.append(bool(overflow.asnumpy()))
        scales.append(manager.scales.asnumpy().copy())
    np.savez(os.path.join(sys.argv[1], f"group_rank{rank}.npz"), overflows=np.array(overflows),
             scales=np.array(scales), **{p.name: p.asnumpy() for p in net.trainable_params()})
    print(f"rank {rank}: group loss scaling done", flush=True)


if __name__ == "__main__":
    main()
