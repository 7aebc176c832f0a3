"""msrun worker for the overflow report in data-parallel mode: ``overflow_report_worker.py OUT_DIR``.

Both ranks train ``backward_overflow_net`` in GRAPH_MODE with ``diagnostics.overflow_report = OUT_DIR/overflow.json``.
Rank 0's batch overflows at the initial scale 1024 and rank 1's does not; the all-reduced flag makes both skip,
so each rank writes its own report (``overflow.rank<r>.json``) and training goes on. Each rank saves its
trajectory and weights to ``OUT_DIR/result_rank<r>.npz``.
"""
import os
import sys

import mindspore as ms
import numpy as np
from mindspore import Tensor, nn
from mindspore.communication import get_rank, init

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from boost_cells import BoostTrainOneStepWithLossScaleCell  # noqa: E402
from tests.helpers import backward_overflow_net, mlp_batch, weights_of  # noqa: E402

# x per rank: 2560 * x * sens is the classifier's input gradient, which overflows float16 above 65504.
RANK_INPUT = {0: 1e-3, 1: 1e-6}
STEPS = 8


def main():
    out_dir = sys.argv[1]
    ms.set_context(mode=ms.GRAPH_MODE, device_target="CPU")
    init()
    ms.set_auto_parallel_context(parallel_mode=ms.ParallelMode.DATA_PARALLEL, gradients_mean=True)
    rank = get_rank()
    net = backward_overflow_net()
    policy = nn.DynamicLossScaleUpdateCell(loss_scale_value=1024.0, scale_factor=2, scale_window=1000)
    cell = BoostTrainOneStepWithLossScaleCell(
        net, nn.SGD(net.trainable_params(), learning_rate=1.0), policy,
        boost_config={"diagnostics": {"overflow_report": os.path.join(out_dir, "overflow.json")}})
    batch = tuple(Tensor(a) for a in mlp_batch(RANK_INPUT[rank]))
    overflows = [bool(cell(*batch)[1].asnumpy()) for _ in range(STEPS)]
    np.savez(os.path.join(out_dir, f"result_rank{rank}.npz"), overflows=np.array(overflows),
             **weights_of(net))
    print(f"rank {rank}: done", flush=True)


if __name__ == "__main__":
    main()
