"""AdaSum across data-parallel groups, for any power-of-two number of groups, on CPU, GPU and Ascend.

Ranks form ``group_number`` groups of ``device_number`` consecutive ranks. Each group averages its gradients
(so its ranks take the same optimizer step and keep the same optimizer state), every rank computes its weight
delta ``d = w_old - w_new``, and the groups' deltas are combined per tensor with the AdaSum rule

    adasum(a, b) = (1 - a.b / (2 |a|^2)) a + (1 - a.b / (2 |b|^2)) b

recursively: at level ``l`` group ``G`` pairs with group ``G xor 2**l`` (rank ``r`` with the rank of the same
position in that group), so after ``log2(group_number)`` levels every rank holds
``adasum(adasum(d0, d1), adasum(d2, d3))``-style results for all groups.

Each level is two all-reduces over the pair (AllGather, Broadcast and Send/Receive are unavailable on sub-groups of
the CPU backend): the first sums ``[g, |g|^2 in this rank's role slot]``, giving ``S = a + b`` and both squared
norms; both ranks then compute ``a.b = (|S|^2 - |a|^2 - |b|^2) / 2`` and the coefficients from identical values;
the second sums each rank's coefficient-weighted vector into ``c_a a + c_b b``. A sum of two floats does not
depend on their order, so both ranks hold bit-identical results and the replicas never drift (deriving the
partner's vector as ``S - g`` would round differently on the two ranks). Per-tensor sums use segment sums over
one flat vector (``flat_vectors``: made and cut back without a loop to compile per tensor), a fixed number of ops
however many tensors the network has. A tensor with ``|a|^2 = 0`` contributes nothing and leaves ``b``'s coefficient
at 1 (``adasum(0, b) = b``).
"""
import numpy as np
from mindspore import Parameter, ParameterTuple, Tensor, nn, ops

from ..distributed import ensure_group
from ..flat_vectors import flat_offsets, flatten, unflatten
from .strategy import UpdateStrategy

__all__ = ["AdaSum", "AdaSumUpdate", "adasum_groups"]

_store = ops.MultitypeFuncGraph("store")
_delta = ops.MultitypeFuncGraph("delta")
_apply = ops.MultitypeFuncGraph("apply")


@_store.register("Tensor", "Tensor")
def _store_tensor(target, value):
    return ops.assign(target, value)


@_delta.register("Tensor", "Tensor", "Tensor")
def _delta_tensor(after, old, new):
    return old - ops.depend(new, after)


@_apply.register("Tensor", "Tensor", "Tensor")
def _apply_tensor(parameter, old, combined):
    return ops.assign(parameter, old - ops.cast(combined, parameter.dtype))


def adasum_groups(rank_size, device_number):
    """Number of AdaSum groups for ``rank_size`` ranks in groups of ``device_number``; raises if not servable."""
    rule = ("AdaSum needs rank_size = device_number * group_number with group_number a power of two >= 2 "
            "(common.device_number sets the group size)")
    if device_number < 1 or rank_size % device_number:
        raise ValueError(f"For 'AdaSum', rank count {rank_size} is not divisible by device_number {device_number}; "
                         f"{rule}.")
    groups = rank_size // device_number
    if groups < 2 or groups & (groups - 1):
        raise ValueError(f"For 'AdaSum', rank count {rank_size} with device_number {device_number} gives "
                         f"{groups} group(s); {rule}.")
    return groups


class AdaSum(nn.Cell):
    """Combine weight deltas across groups with the recursive AdaSum rule, then write the weights.

    Args:
        rank (int): this rank. device_number (int): ranks per group. group_number (int): groups, a power of
            two >= 2. parameter_tuple (ParameterTuple): the weights (shapes and order of the deltas; not kept).
        The first three are kept as attributes of the same names, as the reference keeps them.

    Inputs: ``delta_weights`` (tuple of Tensor, ``old - new`` per weight), ``parameters`` (the weights, written),
    ``old_parameters`` (the weights before this step).
    Outputs: tuple of the assigned weights; every rank gets ``old - adasum(deltas)``.
    """

    def __init__(self, rank, device_number, group_number, parameter_tuple):
        super().__init__()
        adasum_groups(device_number * group_number, device_number)
        self.rank, self.device_number, self.group_number = rank, device_number, group_number
        group, position = divmod(rank, device_number)
        self.all_reduces = []
        self.roles = []
        for level in range(int(np.log2(group_number))):
            partner = (group ^ (1 << level)) * device_number + position
            pair = sorted((rank, partner))
            name = ensure_group(f"boost_cells_adasum_{pair[0]}_{pair[1]}", pair)
            self.all_reduces.append(ops.AllReduce(group=name))
            self.roles.append(pair.index(rank))
        self.offsets, self.total = flat_offsets(parameter_tuple)
        self.tensor_count = len(self.offsets)
        self.segment_ids = Tensor(np.repeat(np.arange(self.tensor_count, dtype=np.int32),
                                            np.diff(self.offsets + (self.total,))))
        self.no_norms = Tensor(np.zeros(self.tensor_count, np.float32))
        self.hyper_map = ops.HyperMap()

    def _tensor_sums(self, values):
        return ops.unsorted_segment_sum(values, self.segment_ids, self.tensor_count)

    def _combine_pair(self, all_reduce, role, flat):
        """``c_a a + c_b b`` for this pair, where this rank holds ``a`` (role 0) or ``b`` (role 1)."""
        own_norms = self._tensor_sums(flat * flat)
        slots = (own_norms, self.no_norms) if role == 0 else (self.no_norms, own_norms)
        summed = all_reduce(ops.concat((flat,) + slots))
        pair_sum = summed[:self.total]
        norm_a = summed[self.total:self.total + self.tensor_count]
        norm_b = summed[self.total + self.tensor_count:]
        dot = (self._tensor_sums(pair_sum * pair_sum) - norm_a - norm_b) / 2
        norm = norm_a if role == 0 else norm_b
        # A zero norm means this rank's tensor is all zeros: any finite coefficient contributes exactly 0.
        coef = 1 - dot / (2 * ops.select(norm > 0, norm, ops.ones_like(norm)))
        return all_reduce(ops.gather(coef, self.segment_ids, 0) * flat)

    def combine(self, delta_weights):
        """The AdaSum of every group's deltas, as a tuple shaped like ``delta_weights`` (float32)."""
        flat = flatten(self.hyper_map, delta_weights)
        for all_reduce, role in zip(self.all_reduces, self.roles):
            flat = self._combine_pair(all_reduce, role, flat)
        return unflatten(self.hyper_map, flat, self.offsets, delta_weights)

    def construct(self, delta_weights, parameters, old_parameters):
        combined = self.combine(delta_weights)
        return self.hyper_map(_apply, parameters, old_parameters, combined)


class AdaSumUpdate(UpdateStrategy):
    """Update strategy (the ``UpdateStrategy`` contract): in-group mean, local optimizer step, AdaSum of the deltas.

    Args:
        optimizer (Cell): the optimizer. info (ParallelInfo): the data-parallel setting (must be distributed).
        device_number (int): ranks per group (``common.device_number``).
        shared (AdaSumUpdate): another AdaSum update whose saved weights this one uses (``for_suffix``: a suffix
            step of gradient freezing over some of its weights); default None: its own.

    Parameters (state, checkpointed):
        adasum.old.<weight name>: the weights before this step's optimizer update.

    ``grad_reducer`` is the mean within the group (None for groups of one rank); ``step_reduced(loss, grads,
    inputs)`` takes gradients already averaged within the group (the reference's order).

    Raises:
        ValueError: stand-alone training, or a rank count AdaSum cannot serve (names the count and the rule).
    """

    def __init__(self, optimizer, info, device_number, *, shared=None):
        if not info.distributed:
            raise ValueError("For 'AdaSum', the 'adasum' feature needs data-parallel training (launch with msrun and "
                             "set parallel_mode='data_parallel'), but the parallel mode is stand-alone.")
        group_number = adasum_groups(info.size, device_number)
        grad_reducer = None
        if device_number > 1:
            first = info.rank // device_number * device_number
            name = ensure_group(f"boost_cells_group_{first}_{device_number}", range(first, first + device_number))
            grad_reducer = nn.DistributedGradReducer(optimizer.parameters, True, device_number, group=name)
        super().__init__(optimizer.parameters, grad_reducer)
        self.optimizer = optimizer
        self.info, self.device_number = info, device_number
        if shared is None:
            self.old_weights = ParameterTuple(Parameter(Tensor(np.zeros(w.shape, np.float32), w.dtype),
                                                        name="adasum.old." + w.name, requires_grad=False)
                                              for w in self.weights)
        else:
            position = {id(w): i for i, w in enumerate(shared.weights)}
            self.old_weights = ParameterTuple(shared.old_weights[position[id(w)]] for w in self.weights)
        self.adasum = AdaSum(info.rank, device_number, group_number, self.weights)
        self.hyper_map = ops.HyperMap()

    def for_suffix(self, optimizer):
        return AdaSumUpdate(optimizer, self.info, self.device_number, shared=self)

    def adasum_part(self):
        return self

    def step_reduced(self, loss, grads, inputs):
        saved = self.hyper_map(_store, self.old_weights, self.weights)
        loss = ops.depend(loss, self.optimizer(ops.depend(grads, saved)))
        deltas = self.hyper_map(ops.partial(_delta, loss), self.old_weights, self.weights)
        return ops.depend(loss, self.adasum(deltas, self.weights, self.old_weights)), self.one_update
