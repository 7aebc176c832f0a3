"""The freezing switch (``boost_cells.freezing.schedule.switch``): it takes the step of the group the schedule trains
from (in GRAPH_MODE one switch over the compiled branches, in PYNATIVE_MODE by reading the index), groups whose steps
are one object share one branch, and it advances the schedule by the updates the step says it applied (0 keeps it);
the host route's fixed step counts them likewise and returns the step's outputs alone."""
import numpy as np
from mindspore import Parameter, Tensor, nn, ops
from mindspore.common import dtype as mstype

from boost_cells.freezing import FreezePlan, FreezeSwitch, ScheduledStep, SequenceSchedule


class Counting(nn.Cell):
    """A step that adds its ``mark`` to a counter and says it applied ``applied`` updates."""

    def __init__(self, counter, mark, applied):
        super().__init__()
        self.counter, self.mark = counter, Tensor(mark, mstype.float32)
        self.applied = Tensor(applied, mstype.int32)

    def construct(self, x):
        return ops.depend(x, ops.assign_add(self.counter, self.mark)), self.applied


def test_the_switch_takes_the_scheduled_step_and_advances_by_what_it_applied(mode):
    counter = Parameter(Tensor(0.0, mstype.float32), name="counter", requires_grad=False)
    full, frozen = Counting(counter, 1.0, 1), Counting(counter, 10.0, 0)
    plan = FreezePlan.from_sequence([0, 0, 2, 1], groups=3, cyclic=True)
    switch = FreezeSwitch(SequenceSchedule(plan), [full, full, frozen])
    assert len(switch.steps) == 2  # groups 0 and 1 share the full step's branch
    x = Tensor(np.ones(2, np.float32))
    seen = []
    for _ in range(4):
        seen.append(switch.current_index())
        switch(x)
    # 0, 0 (full steps, one update each), then 2: the frozen step applies none, so the position stays at 2
    assert seen == [0, 0, 2, 2] and float(counter.asnumpy()) == 1 + 1 + 10 + 10


def test_the_routes_step_counts_what_it_applied_and_returns_the_outputs_alone(mode):
    counter = Parameter(Tensor(0.0, mstype.float32), name="counter", requires_grad=False)
    schedule = SequenceSchedule(FreezePlan.from_sequence([0, 0, 0, 0], groups=2))
    applying = ScheduledStep(schedule, Counting(counter, 1.0, 1))
    skipping = ScheduledStep(schedule, Counting(counter, 10.0, 0))
    x = Tensor(np.arange(2, dtype=np.float32))
    outputs = [applying(x), skipping(x), applying(x)]
    assert all(isinstance(output, Tensor) for output in outputs)  # no (outputs, applied) tuple
    np.testing.assert_array_equal(outputs[-1].asnumpy(), x.asnumpy())
    assert schedule.applied_updates() == 2 and float(counter.asnumpy()) == 1 + 10 + 1
