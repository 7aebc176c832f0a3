"""What several test modules and the msrun workers share (no pytest import; a test module never imports another,
tests/test_layers.py checks): tiny networks and their builders, NumPy references, recording stand-ins for Ascend-only
ops."""
import warnings

import numpy as np
from mindspore import Tensor, nn, ops


class Linear(nn.Cell):
    """y = x W^T + b with W of shape (out, in): small enough to check against NumPy exactly."""

    def __init__(self, n_in=4, n_out=3, seed=0):
        super().__init__()
        rng = np.random.RandomState(seed)
        self.fc = nn.Dense(n_in, n_out, weight_init=Tensor(rng.randn(n_out, n_in).astype(np.float32) * 0.5),
                           bias_init=Tensor(rng.randn(n_out).astype(np.float32) * 0.1))

    def construct(self, x):
        return self.fc(x)


HUGE = 10 ** 400   # a JSON int too large for a float: float(HUGE) raises OverflowError


def linear_setup(optimizer="sgd", lr=0.1, momentum=0.9, seed=0):
    """(net, net_with_loss, optimizer) for the Linear net with mean squared error."""
    net = Linear(seed=seed)
    net_with_loss = nn.WithLossCell(net, nn.MSELoss())
    if optimizer == "sgd":
        opt = nn.SGD(net.trainable_params(), learning_rate=lr)
    else:
        opt = nn.Momentum(net.trainable_params(), learning_rate=lr, momentum=momentum)
    return net, net_with_loss, opt


class Halve(nn.Cell):
    """A gradient reducer a subclass can recognise: every gradient times 0.5."""

    def __init__(self):
        super().__init__()
        self.hyper_map = ops.HyperMap()

    def construct(self, grads):
        return self.hyper_map(ops.partial(ops.mul, 0.5), grads)


def accumulation(k):
    """A boost config dict with gradient accumulation over ``k`` micro-steps."""
    return {"boost": {"mode": "manual", "grad_accumulation": True}, "grad_accumulation": {"grad_accumulation_step": k}}


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


def numpy_adasum_pair(a, b):
    """AdaSum of two vectors: (1 - a.b / (2|a|^2)) a + (1 - a.b / (2|b|^2)) b, with adasum(0, b) = b."""
    dot = float(np.dot(a, b))
    coef_a = 1.0 - (dot / (2 * np.dot(a, a)) if np.dot(a, a) > 0 else 0.0)
    coef_b = 1.0 - (dot / (2 * np.dot(b, b)) if np.dot(b, b) > 0 else 0.0)
    return coef_a * a + coef_b * b


def numpy_adasum(per_group):
    """Recursive AdaSum over a power-of-two list of per-group tensor lists, per tensor, in float64:
    level l combines group g with group g xor 2**l, as Horovod's recursive doubling."""
    values = [[np.asarray(t, np.float64) for t in tensors] for tensors in per_group]
    distance = 1
    while distance < len(values):
        values = [[numpy_adasum_pair(mine.ravel(), theirs.ravel()).reshape(mine.shape) if g < g ^ distance
                   else numpy_adasum_pair(theirs.ravel(), mine.ravel()).reshape(mine.shape)
                   for mine, theirs in zip(values[g], values[g ^ distance])]
                  for g in range(len(values))]
        distance *= 2
    return values[0]


from mindspore.common import dtype as mstype  # noqa: E402  (appended: the float16 nets below)


class Float16MLP(nn.Cell):
    """features = [Dense(4, 8), ReLU, Dense(8, 8), ReLU], classifier = Dense(8, 2); float16, no bias, each Dense
    with every weight equal to w1, w2, w3: an overflow can be planted in one chosen layer."""

    def __init__(self, w1, w2, w3):
        super().__init__()
        dense = [nn.Dense(n_in, n_out, weight_init=Tensor(np.full((n_out, n_in), w, np.float32)),
                          has_bias=False).to_float(mstype.float16)
                 for n_in, n_out, w in ((4, 8, w1), (8, 8, w2), (8, 2, w3))]
        self.features = nn.SequentialCell([dense[0], nn.ReLU(), dense[1], nn.ReLU()])
        self.classifier = dense[2]

    def construct(self, x):
        return self.classifier(self.features(x))


def float16_mlp_with_loss(w1, w2, w3):
    """``Float16MLP`` with mean squared error (float32 labels, float32 loss)."""
    return nn.WithLossCell(Float16MLP(w1, w2, w3), nn.MSELoss())


def forward_overflow_net():
    """features.2 overflows to inf in the forward pass on ``mlp_batch(1.0)``: 8 * 3000 * 4 > 65504."""
    return float16_mlp_with_loss(1.0, 3000.0, 0.01)


def backward_overflow_net():
    """Clean forward pass on ``mlp_batch(1e-3)``; the classifier's input gradient, 2560 * sens, overflows in
    float16 once sens > 25.6."""
    return float16_mlp_with_loss(0.1, 0.1, 1000.0)


def mlp_batch(value, n=2):
    """(x, y): x of shape (n, 4) filled with ``value``, y zeros of shape (n, 2), float32."""
    return np.full((n, 4), value, np.float32), np.zeros((n, 2), np.float32)


class Recorder:
    """Stand-ins for Ascend-only ops: pyfunc Custom ops that append their name to ``events`` when they run."""

    def __init__(self):
        self.events = []
        self.status_value = 0

    def op(self, name, status_like=False):
        def record(x):
            self.events.append(name)
            if status_like:
                return np.full((8,), self.status_value if name == "get" else 0, np.int32)
            return x
        if status_like:
            return ops.Custom(record, out_shape=(8,), out_dtype=mstype.int32, func_type="pyfunc")
        return ops.Custom(record, out_shape=lambda s: s, out_dtype=lambda t: t, func_type="pyfunc")


class Probe(nn.Cell):
    """Identity whose forward and backward passes are recorded."""

    def __init__(self, recorder):
        super().__init__()
        self.forward_op = recorder.op("forward")
        self.backward_op = recorder.op("backward")

    def construct(self, x):
        return self.forward_op(x)

    def bprop(self, x, out, dout):
        return (self.backward_op(dout),)


class ProbedLinear(nn.Cell):
    """Dense(4, 3) with mean squared error, a ``Probe`` recording its forward and backward passes after the Dense."""

    def __init__(self, recorder):
        super().__init__()
        self.probe = Probe(recorder)
        self.fc = nn.Dense(4, 3)
        self.loss = nn.MSELoss()

    def construct(self, x, y):
        return self.loss(self.probe(self.fc(x)), y)


def without_forward_replay(events, mode, tag=""):
    """``events`` less each PYNATIVE forward replay: a ``forward<tag>`` right after ``clear<tag>`` and right before
    ``backward<tag>``, where MindSpore's GradOperation re-ran the forward pass inside the backward."""
    if mode != "pynative":
        return list(events)
    kept = []
    for index, event in enumerate(events):
        replay = event == "forward" + tag and 0 < index < len(events) - 1 \
            and events[index - 1] == "clear" + tag and events[index + 1] == "backward" + tag
        if not replay:
            kept.append(event)
    return kept


class Named(nn.Cell):
    """``net`` as attribute ``name``, so its parameters are called ``<name>.<...>``: distinct across networks."""

    def __init__(self, name, net):
        super().__init__(auto_prefix=False)
        self.net = net
        net.update_parameters_name(name + ".")

    def construct(self, *inputs):
        return self.net(*inputs)


def seeded_dense(n_in, n_out, seed):
    rng = np.random.RandomState(seed)
    return nn.Dense(n_in, n_out, weight_init=Tensor(rng.randn(n_out, n_in).astype(np.float32) * 0.5),
                    bias_init=Tensor(rng.randn(n_out).astype(np.float32) * 0.1))


class SecondStageLoss(nn.Cell):
    """mean((head(first(x)) - y)^2): a network that reads another pair's network (only ``head`` trains here)."""

    def __init__(self, first, head):
        super().__init__(auto_prefix=False)
        self.first = first
        self.head = head

    def construct(self, x, y):
        return ((self.head(self.first(x)) - y) ** 2).mean()


def chained_pairs(lr=0.1, momentum=0.9):
    """(first, head, pairs): pair 0 fits first(x) (4 -> 3) to y, pair 1 fits head(first(x)) (3 -> 3) to y."""
    first = Linear(seed=0)
    head = Named("head", Linear(3, 3, seed=1))
    pairs = [(nn.WithLossCell(first, nn.MSELoss()), nn.Momentum(first.trainable_params(), lr, momentum)),
             (SecondStageLoss(first, head), nn.Momentum(head.trainable_params(), lr, momentum))]
    return first, head, pairs


class DiscriminatorLoss(nn.Cell):
    """Least-squares GAN loss of the discriminator on ``(real, z)``, times ``gain`` (an input: 1, or inf to plant
    an overflow in this loss only). The fake batch is a constant here."""

    def __init__(self, discriminator, generator):
        super().__init__(auto_prefix=False)
        self.discriminator = discriminator
        self.generator = generator

    def construct(self, real, z, gain):
        fake = ops.stop_gradient(self.generator(z))
        return (((self.discriminator(real) - 1) ** 2).mean() + (self.discriminator(fake) ** 2).mean()) * gain


class GeneratorLoss(nn.Cell):
    """Least-squares GAN loss of the generator: ``mean((D(G(z)) - 1)^2)``; ignores ``real`` and ``gain``."""

    def __init__(self, discriminator, generator):
        super().__init__(auto_prefix=False)
        self.discriminator = discriminator
        self.generator = generator

    def construct(self, real, z, gain):
        return ((self.discriminator(self.generator(z)) - 1) ** 2).mean()


def toy_gan(lr=0.01):
    """(discriminator, generator, pairs) of a 2 -> 3 generator and 3 -> 1 discriminator with an Adam each."""
    generator = Named("g", seeded_dense(2, 3, seed=2))
    discriminator = Named("d", seeded_dense(3, 1, seed=3))
    pairs = [(DiscriminatorLoss(discriminator, generator), nn.Adam(discriminator.trainable_params(), lr)),
             (GeneratorLoss(discriminator, generator), nn.Adam(generator.trainable_params(), lr))]
    return discriminator, generator, pairs


def gan_batch(seed, gain=1.0, n=8):
    """(real, z, gain) numpy arrays for ``toy_gan``."""
    rng = np.random.RandomState(seed)
    return (rng.randn(n, 3).astype(np.float32) + 2, rng.randn(n, 2).astype(np.float32), np.float32(gain))


def init_data_parallel():
    """For an msrun worker: GRAPH_MODE on CPU, the collective backend, data-parallel with mean gradients; the rank."""
    import mindspore as ms  # pylint: disable=import-outside-toplevel
    from mindspore.communication import get_rank, init  # pylint: disable=import-outside-toplevel
    ms.set_context(mode=ms.GRAPH_MODE, device_target="CPU")
    init()
    ms.set_auto_parallel_context(parallel_mode=ms.ParallelMode.DATA_PARALLEL, gradients_mean=True)
    return get_rank()


class DataWrapperStandIn(nn.Cell):
    """Stands in for MindSpore's ``_DataWrapper`` of dataset sink mode, which runs only on GPU and Ascend (on CPU
    ``Model.train`` silently falls back to non-sink mode): a Cell (``auto_prefix=False``) holding the train network
    as ``network`` and calling it from its ``construct``, so the train cell's Python ``__call__`` never runs. The
    real wrapper takes the inputs from a GetNext op; here they are passed in."""

    def __init__(self, network):
        super().__init__(auto_prefix=False)
        self.network = network

    def construct(self, *inputs):
        return self.network(*inputs)


class TanhMLP(nn.Cell):
    """Dense layers with tanh between them; with biases, the reference's layer rule makes every two Dense layers
    one freezing layer (``dims`` of 7 sizes: 3 layers)."""

    def __init__(self, dims=(4, 6, 6, 6, 6, 6, 3), seed=0):
        super().__init__()
        rng = np.random.RandomState(seed)
        self.layers = nn.CellList([
            nn.Dense(a, b, weight_init=Tensor(rng.randn(b, a).astype(np.float32) * 0.5),
                     bias_init=Tensor(rng.randn(b).astype(np.float32) * 0.1))
            for a, b in zip(dims[:-1], dims[1:])])
        self.act = nn.Tanh()
        self.depth = len(dims) - 1

    def construct(self, x):
        for i, layer in enumerate(self.layers):
            x = layer(x)
            if i < self.depth - 1:
                x = self.act(x)
        return x


def numpy_mlp(params, x):
    """TanhMLP's output for ``x`` with parameters ``[w0, b0, w1, b1, ...]`` (float64)."""
    weights, biases = params[0::2], params[1::2]
    for i, (w, b) in enumerate(zip(weights, biases)):
        x = x @ w.T + b
        if i < len(weights) - 1:
            x = np.tanh(x)
    return x


def numpy_mlp_grads(params, x, y):
    """Gradients of mean((mlp(x) - y)^2) for TanhMLP's parameters ``[w0, b0, w1, b1, ...]`` (float64)."""
    weights, biases = params[0::2], params[1::2]
    activations, h = [x], x
    for i, (w, b) in enumerate(zip(weights, biases)):
        h = h @ w.T + b
        if i < len(weights) - 1:
            h = np.tanh(h)
        activations.append(h)
    delta = 2.0 * (activations[-1] - y) / activations[-1].size
    grads = []
    for i in range(len(weights) - 1, -1, -1):
        grads = [delta.T @ activations[i], delta.sum(axis=0)] + grads
        if i:
            delta = (delta @ weights[i]) * (1 - activations[i] ** 2)
    return grads


GROUP_STARTS = (0, 4, 8)  # TanhMLP's 12 parameters in 3 layers of two Dense each


def mlp_setup(optimizer="momentum", lr=0.1):
    """(net, net_with_loss, optimizer) for the TanhMLP with mean squared error: Momentum 0.9, or Adam at 0.01."""
    net = TanhMLP()
    params = net.trainable_params()
    if optimizer == "adam":
        opt = nn.Adam(params, learning_rate=0.01)
    else:
        opt = nn.Momentum(params, learning_rate=lr, momentum=0.9)
    return net, nn.WithLossCell(net, nn.MSELoss()), opt


def data(step, n=8):
    """The TanhMLP's batch for ``step`` as Tensors: ``batch`` seeded with the step."""
    return tuple(Tensor(a) for a in batch(n=n, seed=step, n_in=4, n_out=3))


def state(cell):
    """Every Parameter of a train cell by name (weights, optimizer state, schedule position), copied."""
    return {p.name: p.asnumpy().copy() for _, p in cell.parameters_and_names()}


def freeze_config(param_groups=3, freeze_type=0, freeze_p=0.5, total_steps=10, payback=False, **sections):
    """A boost config dict with gradient freezing (and any further sections, e.g. accumulation's); ``freeze_p`` only
    for the schedules that read it (not the automatic one, where it would warn); ``payback`` for the automatic one,
    off by default here, so that what the schedule does never depends on this machine's clock (the payback tests
    set their own, tests/test_payback.py)."""
    from boost_cells.freezing.schedule.sequences import is_automatic  # pylint: disable=import-outside-toplevel
    config = {"boost": {"mode": "manual", "grad_freeze": True},
              "grad_freeze": {"param_groups": param_groups, "freeze_type": freeze_type, "total_steps": total_steps}}
    if not is_automatic(freeze_type):
        config["grad_freeze"]["freeze_p"] = freeze_p
    else:
        config["grad_freeze"]["payback"] = payback
    for name, section in sections.items():
        if name == "boost":
            config["boost"].update(section)
        else:
            config[name] = section
    return config


def numpy_mse_loss(w, b, x, y):
    """mean((x w^T + b - y)^2) over all elements."""
    return float(np.mean((x @ w.T + b - y) ** 2))


def numpy_policy(init, factor, window, min_scale, max_scale, hysteresis, overflows):
    """The dynamic loss-scale policy in Python floats: the scale after each step, for a sequence of overflow
    flags."""
    scale, clean, left, out = init, 0, hysteresis, []
    for overflow in overflows:
        if overflow:
            clean = 0
            left -= 1
            if left <= 0:
                scale, left = max(scale / factor, min_scale), hysteresis
        else:
            clean += 1
            if clean >= window:
                scale, clean, left = min(scale * factor, max_scale), 0, hysteresis
        out.append(scale)
    return out


def numpy_dynamic(flags, scale, factor, window, min_scale, max_scale, hysteresis=1):
    """The dynamic policy in float32, one scale per flag row (elementwise): the scale after each step."""
    scale = np.array(scale, np.float32)
    clean = np.zeros(scale.shape, np.int64)
    left = np.full(scale.shape, hysteresis)
    out = []
    for flag in flags:
        flag = np.array(flag, bool)
        clean = np.where(flag, 0, clean + 1)
        grow = clean >= window
        left = left - flag
        lower = flag if hysteresis == 1 else left <= 0
        left = np.where(grow | lower, hysteresis, left)
        scale = np.where(lower, np.maximum(scale / np.float32(factor), np.float32(min_scale)),
                         np.where(grow, np.minimum(scale * np.float32(factor), np.float32(max_scale)), scale))
        scale = scale.astype(np.float32)
        clean = np.where(grow, 0, clean)
        out.append(scale.copy())
    return out


class NumpyDimReduce:
    """DimReduce in float64 on flat weight vectors (see boost_cells.updates.dim_reduce): BFGS in the PCA
    subspace, the line search over rho^0, rho^1, momentum on the residual gradient."""

    def __init__(self, pca, rho=0.55, gamma=0.9, alpha=0.001, sigma=0.4, eps=1e-20):
        self.pca = np.asarray(pca, np.float64)
        k, n = self.pca.shape
        self.rho, self.gamma, self.alpha, self.sigma, self.eps = rho, gamma, alpha, sigma, eps
        self.bk, self.gk_last, self.sk, self.has_last = np.eye(k), np.zeros(k), np.zeros(k), False
        self.momentum = np.zeros(n)
        self.steps = []

    def bfgs(self, gk):
        """B updated with (s, y = gk - g_last) if a step was accepted before and y.s > eps, else B."""
        y = gk - self.gk_last
        ys = float(y @ self.sk)
        if not self.has_last or ys <= self.eps:
            return self.bk
        left = np.eye(len(gk)) - np.outer(self.sk, y) / ys
        return left @ self.bk @ left.T + np.outer(self.sk, self.sk) / ys

    def line_search(self, loss_fn, w, old_loss, gk, dk):
        """The first of 1, rho with loss(w + step P^T d) < old + sigma step g.d, else 0."""
        for step in (1.0, self.rho):
            if loss_fn(w + step * self.pca.T @ dk) < old_loss + self.sigma * step * float(gk @ dk):
                return step
        return 0.0

    def step(self, loss_fn, w, g):
        """New flat weights after one step from ``w`` with gradient ``g``; ``loss_fn(flat w) -> loss``."""
        gk = self.pca @ g
        bk = self.bfgs(gk)
        dk = -bk @ gk
        step = self.line_search(loss_fn, w, loss_fn(w), gk, dk)
        self.steps.append(step)
        if step:
            self.bk, self.gk_last, self.sk, self.has_last = bk, gk, step * dk, True
        self.momentum = self.gamma * self.momentum + g - self.pca.T @ gk
        return w - (self.alpha * self.momentum - step * self.pca.T @ dk)


def scale_free_run(samples, epochs=5, rank=0, size=1, batch_size=8):
    """The automatic schedule through ``Model.train`` on ``samples`` random rows, this rank's shard of them (every
    ``size``-th row from ``rank``), in batches of ``batch_size``: warm-up a quarter of the run, a decision every
    tenth, threshold 1000 (a segment freezes at the first decision that compares two intervals), 3 groups of a
    TanhMLP, ``total_steps`` left to the run. Returns ``{"updates": the run's updates on this rank, "levels": the
    level reached after each update}``."""
    import mindspore as ms  # pylint: disable=import-outside-toplevel
    from boost_cells import Model  # pylint: disable=import-outside-toplevel
    rng = np.random.RandomState(0)
    x, y = rng.randn(samples, 4).astype(np.float32), rng.randn(samples, 3).astype(np.float32)
    net = TanhMLP()
    config = freeze_config(freeze_type="auto")
    del config["grad_freeze"]["total_steps"]
    config["grad_freeze"].update(auto_warmup_share=0.25, auto_interval_share=0.1, auto_threshold=1000,
                                 auto_loss_drop=0.0, auto_loss_last_fall=1.0)
    model = Model(net, nn.MSELoss(), nn.Momentum(net.trainable_params(), 0.05, 0.9), boost_config_dict=config)
    levels = []

    class Levels(ms.train.Callback):
        def on_train_step_end(self, run_context):
            levels.append(run_context.original_args().train_network.train_step.frozen_for_good())

    dataset = ms.dataset.NumpySlicesDataset({"x": x[rank::size], "y": y[rank::size]}, shuffle=False)
    model.train(epochs, dataset.batch(batch_size), callbacks=[Levels()], dataset_sink_mode=False)
    return {"updates": model.boost.config.section("grad_freeze")["total_steps"], "levels": levels}


# 0.052 of the weights' size over an interval, per 100 updates. With these, the front segment settles by update 9
# and the middle one only by update 17: the schedule waits for the whole front and freezes it after update 17.
INTERVAL, WARMUP, THRESHOLD = 2, 3, 2.6
STEPS = 20


def auto_config(interval=INTERVAL, warmup=WARMUP, threshold=THRESHOLD, total_steps=10, head_ratio=0.0,
                loss_drop=0.0, last_fall=1.0):
    """The automatic schedule deciding every ``interval`` updates from ``warmup`` on, as shares of ``total_steps``;
    by default with the threshold alone (``auto_head_ratio`` 0, ``auto_loss_drop`` 0, ``auto_loss_last_fall`` 1)."""
    config = freeze_config(freeze_type=3, total_steps=total_steps)
    config["grad_freeze"].update(auto_interval_share=interval / total_steps, auto_warmup_share=warmup / total_steps,
                                 auto_threshold=threshold, auto_head_ratio=head_ratio, auto_loss_drop=loss_drop,
                                 auto_loss_last_fall=last_fall)
    return config


def numpy_auto_run(net, batches, lr=0.1, momentum=0.9, threshold=THRESHOLD, head_ratio=0.0, allowed=(2,),
                   allowed_from=0, loss_drop=0.0, last_fall=1.0, adam=False, skips=False):
    """Momentum (or, with ``adam``, MindSpore's Adam: beta1 0.9, beta2 0.999, eps 1e-8, bias-corrected step size)
    training of the TanhMLP where each step trains from group ``frozen`` on, and ``frozen`` follows the rule written out
    here: at the end of every interval (of INTERVAL updates, ending where the update count minus WARMUP is a multiple of
    INTERVAL), each segment's displacement |w - s| / |w| per 100 updates is measured against its weights' copy s from
    the decision before (the initial weights before the first); a segment is quiet when its displacement is below
    ``threshold`` or below ``head_ratio`` times the head's (the last segment's), and has settled when it was quiet at
    this decision and the one before; from WARMUP updates on, the settled segments reach the first front segment from
    ``frozen`` on that has not settled (2 when both have), and ``frozen`` becomes the deepest of the ``allowed`` levels
    within that reach, if deeper (the last group never freezes; by default only level 2 is allowed: both front segments
    freeze together; none at a decision before update ``allowed_from``); then the copies are taken again. With
    ``loss_drop`` above 0, nothing freezes at a decision where the mean training loss of the interval's steps (each
    taken before its update) lies less than ``loss_drop`` of the first interval's mean below that first mean; with
    ``last_fall`` below 1, nothing freezes at a decision before the second interval's, nor where the interval's mean
    lies more than ``last_fall`` of the whole fall (first mean minus this one) below the previous interval's mean. With
    ``skips`` (the host route under payback), a decision where none of the ``allowed`` levels is deeper than ``frozen``,
    or before ``allowed_from``, is not taken at all: no copies, no displacement, the losses go on into the next one.
    Returns (the frozen count before each step, the final parameters)."""
    params = [p.asnumpy().astype(np.float64) for p in net.trainable_params()]
    velocity = [np.zeros_like(p) for p in params]
    second = [np.zeros_like(p) for p in params]  # Adam's second moment (velocity is its first)
    segment = [0] * 4 + [1] * 4 + [2] * 4
    copies = [p.astype(np.float32).copy() for p in params]

    def quiet(displacement):
        return displacement < max(threshold, head_ratio * displacement[2])

    frozen, updates, trace, previous = 0, 0, [], -np.ones(3)
    losses, first_loss, previous_loss = [], None, None
    for x, y in batches:
        trace.append(frozen)
        x, y = x.asnumpy().astype(np.float64), y.asnumpy().astype(np.float64)
        losses.append(np.mean((numpy_mlp(params, x) - y) ** 2))
        grads = numpy_mlp_grads(params, x, y)
        step_size = lr * np.sqrt(1 - 0.999 ** (updates + 1)) / (1 - 0.9 ** (updates + 1))
        for j in range(GROUP_STARTS[frozen], len(params)):
            if adam:
                velocity[j] = 0.9 * velocity[j] + 0.1 * grads[j]
                second[j] = 0.999 * second[j] + 0.001 * grads[j] ** 2
                params[j] = params[j] - step_size * velocity[j] / (np.sqrt(second[j]) + 1e-8)
            else:
                velocity[j] = momentum * velocity[j] + grads[j]
                params[j] = params[j] - lr * velocity[j]
        updates += 1
        skipped = skips and (updates < allowed_from or not any(level > frozen for level in allowed))
        if updates % INTERVAL == WARMUP % INTERVAL and not skipped:
            moved, size = np.zeros(3), np.zeros(3)
            for j, p in enumerate(params):
                moved[segment[j]] += np.sum((p - copies[j]) ** 2)
                size[segment[j]] += np.sum(p ** 2)
            displacement = np.sqrt(moved) / np.sqrt(size) * 100 / INTERVAL
            settled = quiet(displacement) & (previous >= 0) & quiet(previous)
            mean_loss, losses = np.mean(losses), []
            first_loss = mean_loss if first_loss is None else first_loss
            learned = loss_drop == 0 or first_loss - mean_loss >= loss_drop * abs(first_loss)
            if last_fall < 1:
                learned = learned and previous_loss is not None and (
                    previous_loss - mean_loss <= last_fall * (first_loss - mean_loss))
            previous_loss = mean_loss
            if updates >= WARMUP and learned:
                reach = next((g for g in range(frozen, 2) if not settled[g]), 2)
                frozen = max([frozen] + [level for level in allowed if level <= reach and updates >= allowed_from])
            copies = [p.astype(np.float32).copy() for p in params]
            previous = displacement
    return trace, params


def payback_cell():
    """The TanhMLP under the automatic schedule of tests/test_auto_freeze.py (a decision every 2 updates from update 3
    on; its front segment settles by update 9, the middle one by 17), made for a run of 200 updates, with payback."""
    from boost_cells import BoostTrainOneStepCell  # pylint: disable=import-outside-toplevel
    net, net_with_loss, opt = mlp_setup()
    config = auto_config(total_steps=200)
    config["grad_freeze"]["payback"] = True
    return net, BoostTrainOneStepCell(net_with_loss, opt, boost_config=config)


# A payback run's step times by level, seconds (tests/test_payback.py, tests/test_decisions.py).
STEP_SECONDS = {0: 1.0, 1: 0.7, 2: 0.4}


class SetClock:
    """A clock the test moves: ``now`` seconds."""

    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def clocked_run(cell, batches, step_seconds, compile_seconds, clock=None, seen=()):
    """Call ``cell`` on ``batches`` with a clock that makes each call at level ``k`` last ``step_seconds[k]`` (a call
    the frozen-prefix cache served ``step_seconds["cached"]``, where given), and the first at each level (not in
    ``seen``) ``compile_seconds`` more. Returns (the level before each call, or "cached", the warnings given)."""
    from boost_cells import BoostConfigWarning  # pylint: disable=import-outside-toplevel
    clock, route = clock or SetClock(), cell.level_route
    route.ledger.clock = clock
    seen, trace = set(seen), []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for inputs in batches:
            level = cell.train_step.current_index()
            cell(*inputs)
            cached = "cached" in step_seconds and level > 0 and route.state.serving
            trace.append("cached" if cached else level)
            clock.now += step_seconds[trace[-1]] + (0.0 if level in seen else compile_seconds)
            seen.add(level)
    return trace, [w for w in caught if issubclass(w.category, BoostConfigWarning)]


def shuffled_epochs(count, fresh=False, seed=0, rows=8, steps=4):
    """``count`` epochs of ``steps`` batches of ``rows`` samples (4 features to 3 targets): the same samples shuffled
    anew each epoch, or ``fresh`` ones (changed a little every epoch, as augmentation does)."""
    rng = np.random.RandomState(seed)
    x, y = rng.randn(rows * steps, 4).astype(np.float32), rng.randn(rows * steps, 3).astype(np.float32)
    for _ in range(count):
        if fresh:
            x = x + rng.randn(*x.shape).astype(np.float32) * 0.01
        order = rng.permutation(len(x))
        for step in range(steps):
            batch = order[step * rows:(step + 1) * rows]
            yield Tensor(x[batch]), Tensor(y[batch])
