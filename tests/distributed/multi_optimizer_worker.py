"""Data-parallel runs of MultiOptimizerTrainOneStepCell on the toy GAN, run by every rank of an msrun job.

Usage (from tests/test_multi_optimizer.py): ``msrun ... multi_optimizer_worker.py OUT_DIR``. Each rank trains on
its own batches (seed ``10 * step + rank``); at step 1 rank 1 plants an inf in the discriminator's loss. Writes
``<out>/<mode>_rank<r>.npz`` for mode ``per_pair`` and ``shared``: every parameter of the cell after each step
(``<step>/<name>``) and the overflow flags (steps, pairs).
"""
import os
import sys

import numpy as np
from mindspore import Tensor

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from boost_cells import DynamicLossScaleUpdate, MultiOptimizerTrainOneStepCell  # noqa: E402
from tests.helpers import gan_batch, init_data_parallel, toy_gan  # noqa: E402

STEPS = 3
POISON = (1, 1)  # (step, rank)


def run(shared_overflow, rank):
    _, _, pairs = toy_gan()
    policies = [DynamicLossScaleUpdate(1024.0, window=2), DynamicLossScaleUpdate(1024.0, window=2)]
    cell = MultiOptimizerTrainOneStepCell(pairs, policies, shared_overflow, boost_config={"level": "O0"})
    result, flags = {}, []
    for step in range(STEPS):
        gain = np.inf if (step, rank) == POISON else 1.0
        _, overflows, _ = cell(*(Tensor(a) for a in gan_batch(10 * step + rank, gain)))
        flags.append([bool(f.asnumpy()) for f in overflows])
        result.update({f"{step}/{p.name}": p.asnumpy().copy() for p in cell.get_parameters()})
    return {**result, "overflows": np.array(flags)}


def main():
    out_dir, rank = sys.argv[1], init_data_parallel()
    for name, shared_overflow in (("per_pair", False), ("shared", True)):
        np.savez(os.path.join(out_dir, f"{name}_rank{rank}.npz"), **run(shared_overflow, rank))
        print(f"rank {rank}: {name} done", flush=True)


if __name__ == "__main__":
    main()
