"""Overflow detection: the fused finiteness check, a float16 network, and the Ascend float-status ordering."""
import numpy as np
import pytest
from mindspore import Parameter, Tensor, nn, ops
from mindspore.common import dtype as mstype

from boost_cells import BoostTrainOneStepWithLossScaleCell, NPUFloatStatusCheck
from boost_cells.scaling.overflow import FiniteCheck, any_non_finite, make_overflow_detector
from tests.helpers import ProbedLinear, Recorder, batch, weights_of, without_forward_replay


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


@pytest.mark.parametrize("distributed", [False, True], ids=["standalone", "distributed"])
def test_float_status_order_and_decision(mode, distributed):
    """Honest CPU test of the Ascend saturation-mode path: NPUClear/GetFloatStatusV2 have no CPU kernel, so
    recording stand-ins take their place (and of the status all-reduce when distributed). Each step must run
    forward -> clear -> backward -> get [-> all_reduce] -> clear, in GRAPH_MODE only the depend edges force it;
    a non-zero status must skip the update and leave the weights unchanged.

    In PYNATIVE_MODE, MindSpore's GradOperation sometimes replays the forward pass inside the backward (seen after
    a custom-bprop network ran earlier in the process); that replay comes after the clear and before the backward,
    so it keeps the order under test and is dropped before comparing."""
    recorder = Recorder()
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
