"""The automatic freeze-for-good schedule (``freeze_type`` 3, "auto": the front freezes once its weights have
settled): against a NumPy rendering of training and of its rule however the cell is called (both modes), decided in
the graph with no host read, resumed runs deciding as uninterrupted ones."""
import numpy as np
import mindspore as ms
import pytest

from boost_cells import BoostConfig, BoostTrainOneStepCell
from tests.helpers import (STEPS, THRESHOLD, DataWrapperStandIn, auto_config, data, freeze_config, mlp_setup,
                           numpy_auto_run, state)


def traced_run(cell, batches):
    """Call ``cell`` on each of ``batches``; the first group each call trained from."""
    trace = []
    for inputs in batches:
        trace.append(cell.train_step.current_index())
        cell(*inputs)
    return trace


def assert_runs_as_numpy(cell, net, batches, rtol=2e-5, **rule):
    """Train ``cell`` on ``batches`` and hold it to the NumPy rendering of the automatic schedule's rule
    (``numpy_auto_run(net, batches, **rule)``, taken from the initial weights): the same first trained group at every
    call, and the same weights at the end (float32, 20 steps). Returns the trace."""
    expected_trace, expected = numpy_auto_run(net, batches, **rule)
    trace = traced_run(cell, batches)
    assert trace == expected_trace
    for got, want in zip(net.trainable_params(), expected):
        np.testing.assert_allclose(got.asnumpy(), want, rtol=rtol, atol=1e-5)
    return trace


def teacher_data(step, n=8):
    """A batch the TanhMLP can learn: targets a fixed linear map of the inputs (the loss falls), seeded by step."""
    rng = np.random.RandomState(step)
    x = rng.randn(n, 4).astype(np.float32)
    y = (x @ np.random.RandomState(99).randn(4, 3) * 0.5).astype(np.float32)
    return ms.Tensor(x), ms.Tensor(y)


@pytest.mark.slow  # a whole run and its resumed half, compared
def test_resumed_run_freezes_at_the_same_step(graph_mode, tmp_path):
    """Stopped after 10 steps (mid-interval), saved, and resumed in a new cell from the checkpoint, the run freezes
    at the same steps and ends bit-identical to the uninterrupted one: the schedule's statistics are Parameters."""
    batches = [data(step) for step in range(STEPS)]
    _, net_with_loss, opt = mlp_setup()
    whole = BoostTrainOneStepCell(net_with_loss, opt, boost_config=auto_config())
    trace = []
    for inputs in batches:
        trace.append(whole.train_step.current_index())
        whole(*inputs)
    _, net_with_loss, opt = mlp_setup()
    first = BoostTrainOneStepCell(net_with_loss, opt, boost_config=auto_config())
    for inputs in batches[:STEPS // 2]:
        first(*inputs)
    path = str(tmp_path / "auto.ckpt")
    ms.save_checkpoint(first, path)
    _, net_with_loss, opt = mlp_setup()
    resumed = BoostTrainOneStepCell(net_with_loss, opt, boost_config=auto_config())
    assert not ms.load_param_into_net(resumed, ms.load_checkpoint(path))[0]
    resumed_trace = []
    for inputs in batches[STEPS // 2:]:
        resumed_trace.append(resumed.train_step.current_index())
        resumed(*inputs)
    assert resumed_trace == trace[STEPS // 2:] and max(trace) > 0
    final, expected = state(resumed), state(whole)
    assert sorted(final) == sorted(expected)
    for name, value in expected.items():
        assert np.array_equal(value, final[name]), name


def test_auto_config_and_refusals():
    config = BoostConfig.from_dict(auto_config())
    assert BoostConfig.from_dict(config.to_dict()).to_dict() == config.to_dict()
    named = freeze_config(freeze_type="auto")
    assert BoostConfig.from_dict(named).section("grad_freeze")["freeze_type"] == "auto"
    with pytest.raises(ValueError, match="'grad_freeze.auto_threshold'"):
        BoostConfig.from_dict({**auto_config(), "grad_freeze": {"freeze_type": 3, "auto_threshold": 0}})
    with pytest.raises(ValueError, match="'grad_freeze.auto_head_ratio'.*in \\[0, 1\\]"):
        BoostConfig.from_dict({**auto_config(), "grad_freeze": {"freeze_type": 3, "auto_head_ratio": 1.5}})
    assert BoostConfig.from_dict(freeze_config(freeze_type="auto")).section("grad_freeze")["auto_head_ratio"] == 0.5
    for head_ratio in (0.0, 0.5):
        _, net_with_loss, opt = mlp_setup()
        cell = BoostTrainOneStepCell(net_with_loss, opt, boost_config=auto_config(head_ratio=head_ratio))
        assert cell.host_hooks == ()
        assert isinstance(cell.train_step.schedule.frozen, ms.Parameter)
        names = {p.name for p in cell.get_parameters()}
        assert {"grad_freeze.displacement", "grad_freeze.snapshot.0", "grad_freeze.snapshot.1"} <= names
        # The head is copied only to compare the front with it.
        assert ("grad_freeze.snapshot.2" in names) == (head_ratio > 0)


class FreezeThroughMethod(BoostTrainOneStepCell):
    """A model-zoo-port subclass (the YOLOv7 port's shape, reduced to its freezing branch): its own ``construct``
    freezes through the documented ``gradient_freeze_process``."""

    def construct(self, *inputs):
        if self.freeze:
            return self.gradient_freeze_process(*inputs)
        return self.network(*inputs)


CALLS = {"direct": (BoostTrainOneStepCell, False), "nested": (BoostTrainOneStepCell, True),
         "subclass": (FreezeThroughMethod, False), "subclass_nested": (FreezeThroughMethod, True)}


@pytest.mark.slow  # a run per way of calling the cell
@pytest.mark.parametrize("call", sorted(CALLS))
def test_the_schedule_decides_in_the_graph_however_the_cell_is_called(mode, call):
    """Directly, nested in another Cell's graph (sink mode's stand-in), from a subclass's own construct through
    ``gradient_freeze_process``, and that subclass nested: in both modes the automatic schedule freezes at the steps
    the NumPy rendering does and trains the same weights: the front segment settles first, and the schedule waits
    for the middle one, then freezes both (no step trains from group 1). The decision is in the graph: the cell has
    no host hook."""
    net, net_with_loss, opt = mlp_setup()
    kind, nested = CALLS[call]
    cell = kind(net_with_loss, opt, boost_config=auto_config())
    assert cell.host_hooks == ()
    step = DataWrapperStandIn(cell) if nested else cell
    batches = [data(step_index) for step_index in range(STEPS)]
    expected_trace, expected = numpy_auto_run(net, batches)
    trace = []
    for inputs in batches:
        trace.append(cell.train_step.current_index())
        step(*inputs)
    assert trace == expected_trace and trace.index(2) == 17 and 1 not in trace
    for got, want in zip(net.trainable_params(), expected):
        np.testing.assert_allclose(got.asnumpy(), want, rtol=2e-5, atol=1e-5)  # float32, 20 steps


@pytest.mark.parametrize("head_ratio, freezes_after", [(0.5, 13), (0.3, None)])
def test_a_front_slower_than_its_head_settles(mode, head_ratio, freezes_after):
    """With a threshold no segment gets below (0.01 per 100 updates), the front settles only by moving less than
    ``auto_head_ratio`` times the head: in both modes the schedule freezes where the NumPy rendering of that rule
    does (after update 13 at 0.5: from then on the front moves less than half as fast as the head) and trains the
    same weights; at 0.3 the front never gets that slow, and the run trains whole."""
    net, net_with_loss, opt = mlp_setup()
    cell = BoostTrainOneStepCell(net_with_loss, opt, boost_config=auto_config(threshold=0.01, head_ratio=head_ratio))
    batches = [data(step_index) for step_index in range(STEPS)]
    trace = assert_runs_as_numpy(cell, net, batches, threshold=0.01, head_ratio=head_ratio)
    assert (trace.index(2) if 2 in trace else None) == freezes_after and 1 not in trace


def test_a_graph_mode_step_reads_nothing_on_the_host(graph_mode, monkeypatch):
    """No device read per step for the schedule: with the automatic schedule deciding (and freezing) during the
    loop, a GRAPH_MODE step never fetches a Tensor to the host (``Tensor.asnumpy`` is made to fail)."""
    _, net_with_loss, opt = mlp_setup()
    cell = BoostTrainOneStepCell(net_with_loss, opt, boost_config=auto_config())
    batches = [data(step_index) for step_index in range(STEPS)]
    cell(*batches[0])  # the first call compiles

    def refuse(tensor):
        raise AssertionError(f"a host read of a {tensor.shape} Tensor during a step")

    monkeypatch.setattr(ms.Tensor, "asnumpy", refuse)
    for inputs in batches[1:]:
        cell(*inputs)
    monkeypatch.undo()
    assert cell.train_step.frozen_for_good() == 2


@pytest.mark.parametrize("learnable, threshold, loss_drop, freezes_after",
                         [(False, THRESHOLD, 0.5, None), pytest.param(True, 6.0, 0.0, 3, marks=pytest.mark.slow),
                          (True, 6.0, 0.5, 9), pytest.param(True, 6.0, 0.9, None, marks=pytest.mark.slow)])
def test_nothing_freezes_before_the_network_has_learned(mode, learnable, threshold, loss_drop, freezes_after):
    """With ``auto_loss_drop``, the front freezes only once the interval's mean training loss lies that share of the
    first interval's below it. On targets of pure noise (a plateau: the loss cannot fall) the front, which settles
    after update 17 by its displacement alone, never freezes at 0.5. On learnable targets whose front settles at the
    first decision after the warm-up (update 3), the rule waits at 0.5 until the loss has halved (update 9), and at
    0.9 (a fall the run never reaches) freezes nothing. Both modes; trace and weights as the NumPy rendering's."""
    net, net_with_loss, opt = mlp_setup()
    config = auto_config(threshold=threshold, loss_drop=loss_drop)
    cell = BoostTrainOneStepCell(net_with_loss, opt, boost_config=config)
    batches = [(teacher_data if learnable else data)(step_index) for step_index in range(STEPS)]
    trace = assert_runs_as_numpy(cell, net, batches, threshold=threshold, loss_drop=loss_drop)
    assert (trace.index(2) if 2 in trace else None) == freezes_after
    first, last, intervals, _ = cell.train_step.schedule.loss.asnumpy()
    assert intervals == (10 if loss_drop > 0 else 0)
    if loss_drop > 0:
        assert (first - last >= 0.5 * abs(first)) == learnable


@pytest.mark.parametrize("last_fall, freezes_after", [(0.4, 5), pytest.param(0.3, 9, marks=pytest.mark.slow)])
def test_nothing_freezes_while_the_loss_still_falls_steeply(mode, last_fall, freezes_after):
    """With ``auto_loss_last_fall``, the front freezes only once the interval's fall of the mean training loss is at
    most that share of its whole fall since the first interval. On learnable targets whose front settles at the first
    decision after the warm-up (update 3, where the loss fell all of its fall so far), the interval means (1.93, 1.43,
    1.17, 0.59, 0.78 at updates 1 to 9) put the last fall at 35% of the whole at update 5 and 43% at 7, and the loss
    rises at 9: at 0.4 the front freezes after update 5, at 0.3 after update 9. Both modes; trace and weights as the
    NumPy rendering's; the decision's record names the fall it saw."""
    net, net_with_loss, opt = mlp_setup()
    cell = BoostTrainOneStepCell(net_with_loss, opt, boost_config=auto_config(threshold=10.0, last_fall=last_fall))
    batches = [teacher_data(step_index) for step_index in range(STEPS)]
    trace = assert_runs_as_numpy(cell, net, batches, threshold=10.0, last_fall=last_fall)
    assert trace.index(2) == freezes_after
    (froze,) = cell.decisions
    assert froze.update == freezes_after
    assert f"at most {last_fall:.0%} allowed: it has levelled off" in froze.reason
    share = cell.train_step.schedule.monitor_state()["freeze_loss_last_fall"]
    assert share is not None and share < 1.0


@pytest.mark.parametrize("head_ratio, freezes_after", [pytest.param(0.5, None, marks=pytest.mark.slow), (0.9, 5)])
def test_under_adam_the_threshold_is_not_applied(mode, head_ratio, freezes_after):
    """Adam moves every weight by about its learning rate whatever the gradient, so a segment's displacement says
    nothing of whether it still learns: the TanhMLP under Adam at 0.01 moves its segments far below the threshold
    (2.6 per 100 updates) from the first decision, and a Momentum-style rule would freeze the front after update 3.
    Under Adam the threshold is not applied: at ``auto_head_ratio`` 0.5 nothing freezes (the front moves as fast as
    the head); at 0.9 a segment settles by moving less than 0.9 times the head, after update 5. Both modes; trace and
    weights as the NumPy rendering of Adam's."""
    net, net_with_loss, opt = mlp_setup("adam")
    cell = BoostTrainOneStepCell(net_with_loss, opt, boost_config=auto_config(head_ratio=head_ratio))
    assert cell.train_step.schedule.normalised_by == "Adam"
    batches = [data(step_index) for step_index in range(STEPS)]
    threshold_trace, _ = numpy_auto_run(net, batches, lr=0.01, adam=True, head_ratio=head_ratio)
    assert threshold_trace.index(2) == 3  # what applying the threshold would do
    trace = assert_runs_as_numpy(cell, net, batches, rtol=1e-4, lr=0.01, adam=True, threshold=0.0,
                                 head_ratio=head_ratio)
    assert (trace.index(2) if 2 in trace else None) == freezes_after
