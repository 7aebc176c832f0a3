"""Overflow detection: the fused finiteness check, a float16 network, and the Ascend float-status ordering."""
import numpy as np
import pytest
from mindspore import Parameter, Tensor, nn, ops
from mindspore.common import dtype as mstype

from boost_cells import BoostTrainOneStepWithLossScaleCell, NPUFloatStatusCheck
from boost_cells.scaling.overflow import FiniteCheck, any_non_finite, make_overflow_detector
from tests.helpers import batch, weights_of


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_any_non_finite_matches_numpy(graph_mode, dtype):
    rng = np.random.RandomState(0)
    big = np.finfo(dtype).max
    cases = [[rng.randn(3, 4), rng.randn(5)],
             [np.full((2, 2), big), np.full(3, -big)],  # huge but finite: no false positive
             [rng.randn(3), np.array([1.0, np.inf])],
             [np.array([np.nan]), rng.randn(2, 2)],
             [np.array([np.inf, -np.inf]), np.zeros(2)]]
    for case in cases:
        tensors = tuple(Tensor(np.asarray(a, dtype)) for a in case)
        expected = not all(np.isfinite(np.asarray(a, dtype)).all() for a in case)
        assert bool(any_non_finite(tensors).asnumpy()) == expected


class Float16MatMul(nn.Cell):
    """out = x @ w in float16, with a float32 master weight (mixed precision)."""

    def __init__(self):
        super().__init__()
        self.w = Parameter(Tensor(np.ones((1, 1), np.float32)), name="w")

    def construct(self, x):
        out = ops.matmul(ops.cast(x, mstype.float16), ops.cast(self.w, mstype.float16))
        return out.sum()


def test_float16_matmul_under_scale_8(mode):
    """Gradient x * 8 overflows float16 for x = 40000 (320000 > 65504) and for +-inf; not for 0 or 10."""
    net = Float16MatMul()
    cell = BoostTrainOneStepWithLossScaleCell(net, nn.SGD(net.trainable_params(), 1e-6), Tensor(8.0),
                                              boost_config={"level": "O0"})
    flags = [bool(cell(Tensor([[x]], mstype.float32))[1].asnumpy()) for x in (-np.inf, 0.0, 40000.0, 10.0, np.inf)]
    assert flags == [True, False, True, False, True]


def test_detector_choice_on_cpu():
    assert isinstance(make_overflow_detector(False), FiniteCheck)


class _Recorder:
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


@pytest.mark.parametrize("distributed", [False, True], ids=["standalone", "distributed"])
def test_float_status_order_and_decision(mode, distributed):
    """Honest CPU test of the Ascend saturation-mode path: NPUClear/GetFloatStatusV2 have no CPU kernel, so
    recording stand-ins take their place (and of the status all-reduce when distributed). Each step must run
    forward -> clear -> backward -> get [-> all_reduce] -> clear, in GRAPH_MODE only the depend edges force it;
    a non-zero status must skip the update and leave the weights unchanged.

    In PYNATIVE_MODE, MindSpore's GradOperation sometimes replays the forward pass inside the backward (seen after
    a custom-bprop network ran earlier in the process); that replay comes after the clear and before the backward,
    so it keeps the order under test and is dropped before comparing."""
    recorder = _Recorder()
    detector = NPUFloatStatusCheck(distributed, clear_op=recorder.op("clear", True), get_op=recorder.op("get", True),
                                   all_reduce_op=recorder.op("all_reduce") if distributed else None)
    net = ProbedLinear(recorder)
    cell = BoostTrainOneStepWithLossScaleCell(net, nn.SGD(net.trainable_params(), 0.1), Tensor(4.0),
                                              boost_config={"level": "O0"}, overflow_detector=detector)
    x, y = (Tensor(a) for a in batch())
    step = ["forward", "clear", "backward", "get"] + (["all_reduce"] if distributed else []) + ["clear"]
    _, overflow, _ = cell(x, y)
    assert without_forward_replay(recorder.events, mode) == step and not overflow
    before = weights_of(net)
    recorder.events.clear()
    recorder.status_value = 1
    _, overflow, _ = cell(x, y)
    assert without_forward_replay(recorder.events, mode) == step and bool(overflow.asnumpy())
    after = weights_of(net)
    assert all(np.array_equal(before[k], after[k]) for k in before)


def test_finite_check_start_is_a_pass_through(graph_mode):
    status, sens = FiniteCheck().start(Tensor(1.0), Tensor(2.0))
    assert float(sens.asnumpy()) == 2.0 and status.shape == ()
