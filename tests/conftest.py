"""Shared tiny networks and NumPy references for the tests."""
import numpy as np
import mindspore as ms
import pytest
from mindspore import Tensor, nn

MODES = {"graph": ms.GRAPH_MODE, "pynative": ms.PYNATIVE_MODE}


@pytest.fixture(params=sorted(MODES))
def mode(request):
    """Run the test once in GRAPH_MODE and once in PYNATIVE_MODE (on CPU)."""
    ms.set_context(mode=MODES[request.param], device_target="CPU")
    return request.param


@pytest.fixture
def graph_mode():
    ms.set_context(mode=ms.GRAPH_MODE, device_target="CPU")


class Linear(nn.Cell):
    """y = x W^T + b with W of shape (out, in): small enough to check against NumPy exactly."""

    def __init__(self, n_in=4, n_out=3, seed=0):
        super().__init__()
        rng = np.random.RandomState(seed)
        self.fc = nn.Dense(n_in, n_out, weight_init=Tensor(rng.randn(n_out, n_in).astype(np.float32) * 0.5),
                           bias_init=Tensor(rng.randn(n_out).astype(np.float32) * 0.1))

    def construct(self, x):
        return self.fc(x)


def linear_setup(optimizer="sgd", lr=0.1, momentum=0.9, seed=0):
    """(net, net_with_loss, optimizer) for the Linear net with mean squared error."""
    net = Linear(seed=seed)
    net_with_loss = nn.WithLossCell(net, nn.MSELoss())
    if optimizer == "sgd":
        opt = nn.SGD(net.trainable_params(), learning_rate=lr)
    else:
        opt = nn.Momentum(net.trainable_params(), learning_rate=lr, momentum=momentum)
    return net, net_with_loss, opt


def batch(n=8, seed=1, n_in=4, n_out=3):
    rng = np.random.RandomState(seed)
    return rng.randn(n, n_in).astype(np.float32), rng.randn(n, n_out).astype(np.float32)


def weights_of(net):
    return {p.name: p.asnumpy().copy() for p in net.trainable_params()}


def numpy_mse_grads(w, b, x, y):
    """Gradients of mean((x w^T + b - y)^2) over all elements, for w (out, in) and b (out,)."""
    err = x @ w.T + b - y
    scale = 2.0 / err.size
    return scale * err.T @ x, scale * err.sum(axis=0)


class NumpyOptimizer:
    """SGD (momentum 0) or MindSpore's Momentum: v = m v + g; w -= lr v."""

    def __init__(self, lr, momentum=0.0):
        self.lr, self.momentum, self.velocity = lr, momentum, None

    def step(self, params, grads):
        if self.velocity is None:
            self.velocity = [np.zeros_like(g) for g in grads]
        self.velocity = [self.momentum * v + g for v, g in zip(self.velocity, grads)]
        return [p - self.lr * v for p, v in zip(params, self.velocity)]
