"""Data-parallel helpers: decided once in ``__init__`` from MindSpore's parallel context.

Every collective used here (AllReduce, also on sub-groups made by ``create_group``) exists on the CPU, NCCL and HCCL
backends; AllGather and Broadcast (world group only on CPU), ReduceScatter and Send/Receive are avoided.
"""
import mindspore as ms
from mindspore import nn
from mindspore.communication import GlobalComm, create_group, get_group_size, get_rank

from .mindspore_internals import communication_group_exists

__all__ = ["ParallelInfo", "parallel_info", "make_grad_reducer", "ensure_group"]

_DATA_PARALLEL_MODES = ("data_parallel", "hybrid_parallel")


class ParallelInfo:
    """The data-parallel setting a train cell is built under.

    Attributes:
        distributed (bool): whether gradients must be reduced across ranks.
        rank (int), size (int): this rank and the number of ranks (0 and 1 when stand-alone).
        gradients_mean (bool): mean (True) or sum (False) of the ranks' gradients.
    """

    def __init__(self, distributed, rank, size, gradients_mean):
        self.distributed = distributed
        self.rank = rank
        self.size = size
        self.gradients_mean = gradients_mean


def parallel_info():
    """Read the current parallel context (``ms.set_auto_parallel_context`` after ``init()``)."""
    mode = ms.get_auto_parallel_context("parallel_mode")
    if mode not in _DATA_PARALLEL_MODES:
        return ParallelInfo(False, 0, 1, True)
    return ParallelInfo(True, get_rank(), get_group_size(), bool(ms.get_auto_parallel_context("gradients_mean")))


def ensure_group(name, ranks):
    """Create communication group ``name`` over ``ranks`` unless this process has it already (MindSpore keeps the
    record of its groups; nothing is cached here); returns ``name``."""
    if not communication_group_exists(name):
        create_group(name, list(ranks))
    return name


def make_grad_reducer(weights, info, group=GlobalComm.WORLD_COMM_GROUP, degree=None):
    """None when stand-alone (nothing to reduce), else MindSpore's ``DistributedGradReducer`` over ``group``."""
    if not info.distributed:
        return None
    return nn.DistributedGradReducer(weights, info.gradients_mean, degree or info.size, group=group)
