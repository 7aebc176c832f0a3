"""A two-group network for group loss scaling, whose groups' gradients can be poisoned with inf one at a time, and
its NumPy gradients; shared by tests/test_group_loss_scale.py and tests/distributed/group_worker.py."""
import numpy as np
from mindspore import Parameter, Tensor, nn, ops

from boost_cells.scaling.group_loss_scale import _ScaleGradient


class PoisonedLinear(nn.Cell):
    """y = x w^T + b; the gradient of w is multiplied by the input ``f`` (1 for clean, inf to plant an overflow)."""

    def __init__(self, w, b):
        super().__init__()
        self.weight = Parameter(Tensor(w), name="weight")
        self.bias = Parameter(Tensor(b), name="bias")
        self.poison = _ScaleGradient()

    def construct(self, x, f):
        return ops.matmul(x, self.poison(self.weight, f).T) + self.bias


class TwoGroupNet(nn.Cell):
    """Group 1: tanh(l1(x)); group 2: l2. Manager calls at the input, between the groups and at the output."""

    def __init__(self, manager, seed=0):
        super().__init__()
        rng = np.random.RandomState(seed)
        self.l1 = PoisonedLinear(rng.randn(5, 4).astype(np.float32) * 0.5, rng.randn(5).astype(np.float32) * 0.1)
        self.l2 = PoisonedLinear(rng.randn(3, 5).astype(np.float32) * 0.5, rng.randn(3).astype(np.float32) * 0.1)
        self.manager = manager

    def construct(self, x, f1, f2):
        x = self.manager(x, 0, 1)
        x = ops.tanh(self.l1(x, f1))
        x = self.manager(x, 1, 2)
        x = self.l2(x, f2)
        return self.manager(x, 2, 3)

    def groups(self):
        return [[self.l1.weight, self.l1.bias], [self.l2.weight, self.l2.bias]]


class WithMSE(nn.Cell):
    """Mean squared error of a TwoGroupNet; inputs ``(x, y, f1, f2)``."""

    def __init__(self, net):
        super().__init__(auto_prefix=False)
        self.net = net

    def construct(self, x, y, f1, f2):
        return ((self.net(x, f1, f2) - y) ** 2).mean()


def numpy_two_group_grads(params, x, y):
    """Gradients of mean((tanh(x w1^T + b1) w2^T + b2 - y)^2) for [w1, b1, w2, b2], and of x."""
    w1, b1, w2, b2 = (np.asarray(p, np.float64) for p in params)
    h = np.tanh(x @ w1.T + b1)
    dout = 2.0 * (h @ w2.T + b2 - y) / y.size
    dz = (dout @ w2) * (1 - h ** 2)
    return [dz.T @ x, dz.sum(0), dout.T @ h, dout.sum(0)], dz @ w1
