"""DimReduce: quasi-Newton steps in a PCA subspace of the weight trajectory, plus momentum on the residual.

With ``P`` (k x n, orthonormal rows: ``boost_cells.updates.pca``) and ``g`` the (rank-mean) gradient flattened
over the weights, one step is

    g_k = P g;  B = BFGS(B, s, y = g_k - g_last) if y.s > eps;  d_k = -B g_k
    m = the first of 0, 1 with  L(w + rho^m P^T d_k) < L(w) + sigma rho^m g_k.d_k,  else no subspace step
    mom = gamma mom + g - P^T g_k;   w = w - (alpha mom - rho^m P^T d_k)      (rho^m taken as 0 without a step)

with ``BFGS(B, s, y) = (I - s y^T / y.s) B (I - y s^T / y.s) + s s^T / y.s``. An accepted step stores
``g_last = g_k``, ``s = rho^m d_k`` and the new ``B``; a rejected one keeps the old ``g_last``, ``s`` and ``B``
(as the reference restores them). The line search costs one or two extra forward passes on the step's inputs.

No optimizer is used: DimReduce writes the update above itself, as the reference does through ``SGD(lr=1)``; the
user's optimizer is neither called nor changed (its learning rate, momentum and state play no part).
"""
import threading

import numpy as np
from mindspore import Parameter, ParameterTuple, Tensor, nn, ops
from mindspore.common import dtype as mstype

from ..distributed import ParallelInfo, make_grad_reducer
from ..flat_vectors import flat_offsets, flatten, unflatten
from ..rules import check, is_int
from .pca import pca_matrix
from .strategy import UpdateStrategy

__all__ = ["DimReduce", "bfgs", "make_dim_reduce", "share_from_rank0"]

# The reference's curvature threshold: the BFGS update is skipped unless y.s > EPSILON.
EPSILON = 1e-20

_trial = ops.MultitypeFuncGraph("trial")
_final = ops.MultitypeFuncGraph("final")
_unscale = ops.MultitypeFuncGraph("unscale")


@_trial.register("Tensor", "Tensor", "Tensor", "Tensor")
def _trial_tensor(step, weight, saved, direction):
    return ops.assign(weight, ops.cast(saved + step * direction, weight.dtype))


@_final.register("Number", "Number", "Tensor", "Tensor", "Tensor", "Tensor", "Tensor", "Tensor")
def _final_tensor(gamma, alpha, step, weight, saved, momentum, residual, direction):
    new_momentum = ops.assign(momentum, gamma * momentum + residual)
    return ops.assign(weight, ops.cast(saved - (alpha * new_momentum - step * direction), weight.dtype))


@_unscale.register("Tensor", "Tensor")
def _unscale_tensor(loss_scale, grad):
    return ops.cast(grad, mstype.float32) / ops.cast(loss_scale, mstype.float32)


def bfgs(bk, gk_last, sk, has_last, gk):
    """The inverse-Hessian estimate for a step with subspace gradient ``gk`` (k, 1): ``bk`` (k, k) updated with
    ``(sk, y = gk - gk_last)`` when ``has_last`` (a step was accepted before) and y.s > EPSILON, else ``bk``."""
    y = gk - gk_last
    ys = ops.reduce_sum(y * sk)
    curved = ops.logical_and(has_last, ys > EPSILON)
    inv = 1.0 / ops.select(curved, ys, ops.ones_like(ys))
    left = ops.eye(gk.shape[0], gk.shape[0], mstype.float32) - ops.matmul(sk, ops.transpose(y, (1, 0))) * inv
    updated = ops.matmul(ops.matmul(left, bk), ops.transpose(left, (1, 0))) \
        + ops.matmul(sk, ops.transpose(sk, (1, 0))) * inv
    return ops.select(curved, updated, bk)


class DimReduce(UpdateStrategy):
    """The DimReduce update strategy: see the module docstring.

    Same constructor and ``construct`` as ``mindspore.boost.DimReduce``. One difference: ``pca_mat_local`` is the
    whole matrix on every rank (each rank projects the all-reduced gradient itself, so only AllReduce is needed, and
    every rank computes the same values: the replicas stay bit-identical). Its own calls are the ``UpdateStrategy``
    contract's: ``step(loss, grads, inputs)`` takes this rank's unscaled gradients and reduces them,
    ``step_reduced(loss, grads, inputs)`` gradients already reduced; ``inputs`` is the tuple of the step's network
    inputs, on which the line search runs the network. Data-parallel, gradients and losses are averaged over ranks
    (whatever ``gradients_mean`` says: the line search compares a mean loss).

    Args:
        network (Cell): the network with loss, run again by the line search.
        optimizer (Cell): accepted for the reference's signature and not used (see the module docstring).
        weight (tuple of Parameter): the weights, in ``pca_mat_local``'s column order.
        pca_mat_local (numpy.ndarray): the PCA matrix, shape (n_components, n), n = total weight elements.
        n_components (int): k. rho, gamma, sigma (float in (0, 1)), alpha (float > 0): as in the module docstring.
        rank (int), rank_size (int): this rank and the number of data-parallel ranks (1 stand-alone).

    Parameters (state, checkpointed):
        dim_reduce.bk (float32, (k, k)): the BFGS inverse-Hessian estimate B, initially the identity.
        dim_reduce.gk_last (float32, (k, 1)): g_k of the last accepted step.
        dim_reduce.sk (float32, (k, 1)): the last accepted subspace step rho^m d_k.
        dim_reduce.has_last (bool): whether a step was accepted yet (no BFGS update before).
        dim_reduce.momentum.<weight name> (float32): the residual-gradient momentum.
        dim_reduce.saved.<weight name> (float32): a clone of the weights, equal to them between steps, from which
            the line search restores them (the reference's ``weight_clone``).

    Inputs (the reference's): ``loss`` (Tensor, this rank's loss), ``old_grad`` (tuple of Tensor, the gradients
    already reduced across ranks, scaled by ``loss_scale``: the reference's train cell passes them through its
    ``grad_reducer``), ``loss_scale`` (Tensor, the backward pass's start, which the gradients are divided by),
    ``weight`` (the weights this DimReduce was built over: the reference's cell passes the same tuple),
    ``weight_clone`` (a tuple of Parameters shaped as the weights, which receives the weights after the step, as
    the reference keeps its clone equal to them), ``*inputs`` (the step's network inputs, for the line search).
    Outputs: ``loss``, depending on the update.

    Raises:
        TypeError: ``network`` is not a Cell, or a weight is not float32. ValueError: an argument out of range (each
            checked by its rule in ``boost_cells.rules``, as the config's ``dim_reduce`` key of that name, so
            ``alpha=inf`` is refused here as there), or a matrix whose shape does not match ``n_components`` and the
            weights.
    """

    def __init__(self, network, optimizer, weight, pca_mat_local, n_components, rho, gamma, alpha, sigma, rank,
                 rank_size):
        if not isinstance(network, nn.Cell):
            raise TypeError(f"For 'DimReduce', 'network' must be a Cell, but got {type(network).__name__}.")
        for name, value in (("n_components", n_components), ("rho", rho), ("gamma", gamma), ("alpha", alpha),
                            ("sigma", sigma), ("rank_size", rank_size)):
            check("DimReduce", name, value)
        if not is_int(rank) or not 0 <= rank < rank_size:
            raise ValueError(f"For 'DimReduce', 'rank' must be an int in [0, rank_size) = [0, {rank_size}), but got "
                             f"{rank!r}.")
        info = ParallelInfo(rank_size > 1, rank, rank_size, True)
        weights = ParameterTuple(weight)
        super().__init__(weights, make_grad_reducer(weights, info))
        del optimizer  # the reference's argument: DimReduce writes its update itself
        for w in self.weights:
            if w.dtype != mstype.float32:
                raise TypeError(f"For 'DimReduce', every weight must be float32, but '{w.name}' is {w.dtype}.")
        self.offsets, total = flat_offsets(self.weights)
        pca = np.asarray(pca_mat_local)
        if pca.shape != (n_components, total):
            raise ValueError(f"For 'DimReduce', 'pca_mat_local' must have shape (n_components, weight elements) = "
                             f"({n_components}, {total}), but got {pca.shape}.")
        if pca.dtype.kind not in "fiu" or not np.all(np.isfinite(pca)):
            raise ValueError("For 'DimReduce', 'pca_mat_local' must hold finite real numbers (a non-finite direction "
                             f"would reach every weight), but got dtype {pca.dtype} with non-finite or non-real "
                             "values.")
        self.network = network
        self.pca = Tensor(pca, mstype.float32)
        self.steps = (Tensor(1.0, mstype.float32), Tensor(float(rho), mstype.float32))
        self.no_step = Tensor(0.0, mstype.float32)
        self.gamma, self.alpha, self.sigma = float(gamma), float(alpha), float(sigma)
        self.rank, self.rank_size = rank, rank_size
        self.loss_reducer = ops.AllReduce() if rank_size > 1 else None
        self.project_back = ops.MatMul(transpose_a=True)
        self.hyper_map = ops.HyperMap()
        self.assign = ops.Assign()
        self.bk = Parameter(Tensor(np.eye(n_components), mstype.float32), name="dim_reduce.bk", requires_grad=False)
        self.gk_last = Parameter(Tensor(np.zeros((n_components, 1)), mstype.float32), name="dim_reduce.gk_last",
                                 requires_grad=False)
        self.sk = Parameter(Tensor(np.zeros((n_components, 1)), mstype.float32), name="dim_reduce.sk",
                            requires_grad=False)
        self.has_last = Parameter(Tensor(False), name="dim_reduce.has_last", requires_grad=False)
        self.momentum = ParameterTuple(Parameter(Tensor(np.zeros(w.shape, np.float32)), requires_grad=False,
                                                 name="dim_reduce.momentum." + w.name)
                                       for w in self.weights)
        self.saved = ParameterTuple(Parameter(Tensor(w.asnumpy()), requires_grad=False,
                                              name="dim_reduce.saved." + w.name)
                                    for w in self.weights)

    def _mean_loss(self, loss):
        loss = ops.cast(loss, mstype.float32)
        if self.loss_reducer is not None:
            loss = self.loss_reducer(loss) / self.rank_size
        return loss

    def _try(self, step, old_loss, gd, directions, inputs):
        """Whether ``w + step * P^T d_k`` passes the sufficient-decrease test; the weights are restored after."""
        trial = self.hyper_map(ops.partial(_trial, step), self.weights, self.saved, directions)
        new_loss = self._mean_loss(self.network(*ops.depend(inputs, trial)))
        accepted = new_loss < old_loss + self.sigma * step * gd
        restored = self.hyper_map(self.assign, self.weights, ops.depend(self.saved, new_loss))
        return ops.depend(accepted, restored)

    def construct(self, loss, old_grad, loss_scale, weight, weight_clone, *inputs):
        grads = self.hyper_map(ops.partial(_unscale, loss_scale), old_grad)
        loss = self.step_reduced(loss, grads, inputs)[0]
        return ops.depend(loss, self.hyper_map(self.assign, weight_clone, ops.depend(weight, loss)))

    def for_suffix(self, optimizer):
        raise ValueError("For 'DimReduce', gradient freezing cannot train a suffix of the weights with DimReduce: its "
                         "PCA subspace and line search span every weight at once, so a step over a suffix alone has no "
                         "meaning. Switch 'grad_freeze' off (a config with 'dim_reduce' on does), or 'dim_reduce' "
                         "off, or pass the optimizer itself rather than a FreezeOpt.")

    def step_reduced(self, loss, grads, inputs):
        if not inputs:
            raise ValueError("For 'DimReduce', 'inputs' must be the step's network inputs, which the line search runs "
                             "the network on, but got none.")
        old_loss = self._mean_loss(loss)
        flat = flatten(self.hyper_map, grads)
        gk = ops.matmul(self.pca, ops.reshape(flat, (-1, 1)))
        bk = bfgs(self.bk, self.gk_last, self.sk, self.has_last, gk)
        dk = -ops.matmul(bk, gk)
        gd = ops.reduce_sum(gk * dk)
        directions = unflatten(self.hyper_map, ops.reshape(self.project_back(self.pca, dk), (-1,)), self.offsets,
                               self.weights)
        saved = self.hyper_map(self.assign, self.saved, self.weights)
        inputs = ops.depend(inputs, saved)
        accepted = self._try(self.steps[0], old_loss, gd, directions, inputs)
        step = ops.select(accepted, self.steps[0], self.no_step)
        if not accepted:
            accepted = self._try(self.steps[1], old_loss, gd, directions, inputs)
            step = ops.select(accepted, self.steps[1], self.no_step)
        ops.assign(self.bk, ops.select(accepted, bk, self.bk))
        ops.assign(self.sk, ops.select(accepted, step * dk, self.sk))
        ops.assign(self.gk_last, ops.select(accepted, gk, self.gk_last))
        ops.assign(self.has_last, ops.logical_or(self.has_last, accepted))
        residuals = unflatten(self.hyper_map, flat - ops.reshape(self.project_back(self.pca, gk), (-1,)), self.offsets,
                              self.weights)
        updated = self.hyper_map(ops.partial(_final, self.gamma, self.alpha, step), self.weights, self.saved,
                                 self.momentum, residuals, directions)
        cloned = self.hyper_map(self.assign, self.saved, updated)
        return ops.depend(loss, cloned), self.one_update


def make_dim_reduce(section, network, optimizer, info):
    """The DimReduce strategy of a config's ``dim_reduce`` section for ``optimizer.parameters``.

    Every rank computes the PCA matrix itself (``pca_matrix``: no rank waits for a file another rank writes, and a
    bad source raises the same error on every rank at once); data-parallel, ``share_from_rank0`` then gives every
    rank rank 0's matrix exactly.
    """
    matrix = pca_matrix(section, optimizer.parameters, info.rank)
    if info.distributed:
        matrix = share_from_rank0(matrix, info.rank, section["timeout"])
    return DimReduce(network, optimizer, optimizer.parameters, matrix, section["n_components"], section["rho"],
                     section["gamma"], section["alpha"], section["sigma"], info.rank, info.size)


def share_from_rank0(matrix, rank, timeout):
    """Rank 0's ``matrix`` on every rank, by an all-reduce in which the other ranks add zeros (x + 0 = x exactly).

    The all-reduce waits for every rank to reach it (each computes its own matrix first); it runs in a helper
    thread so that a peer that never arrives (it failed or hangs) gives a clear error after ``timeout`` seconds
    (``dim_reduce.timeout``; 0 waits without a bound) instead of a silent hang.
    """
    contribution = Tensor(matrix if rank == 0 else np.zeros_like(matrix))
    result = {}
    worker = threading.Thread(target=lambda: result.update(value=ops.AllReduce()(contribution).asnumpy()),
                              daemon=True)
    worker.start()
    worker.join(min(timeout, threading.TIMEOUT_MAX) if timeout else None)  # join(10**30) raises OverflowError
    if "value" not in result:
        raise RuntimeError(f"For 'DimReduce', the ranks did not all reach the PCA matrix all-reduce within "
                           f"'dim_reduce.timeout' = {timeout} s: another rank failed or is still computing its "
                           "matrix (see its log), or raise the timeout.")
    return result["value"]
