"""Model.train fits an interval, progressive or automatic freezing schedule to its run: a left-out
grad_freeze.total_steps comes from the epochs and the dataset (counted from the run's start, so a resumed run gets
the uninterrupted one's schedule), and the train cell's schedule follows the plan made for it (fitted in place, the
cell never rebuilt, so it keeps what was loaded into it); a given total_steps that differs from the run is kept,
with a warning that says when freezing starts.

A 3-Dense MLP (2 freezing groups: the front two Dense layers, the last one) in PyNative mode, 4 steps an epoch."""
import numpy as np
import mindspore as ms
import mindspore.dataset as ds
import pytest
from mindspore import Parameter, Tensor, nn
from mindspore.train import Callback

import boost_cells.model
from boost_cells import BoostConfigWarning, Model
from boost_cells.explain import run_differs
from boost_cells.freezing import FreezePlan, freeze_index_sequence

STEPS, BATCH = 4, 8


def mlp(seed):
    ms.set_seed(seed)
    return nn.SequentialCell([nn.Dense(4, 8), nn.Tanh(), nn.Dense(8, 8), nn.Tanh(), nn.Dense(8, 3)])


def dataset():
    rng = np.random.RandomState(0)
    x = rng.randn(STEPS * BATCH, 4).astype(np.float32)
    y = (x[:, 0] > 0).astype(np.int32) + (x[:, 1] > 1).astype(np.int32)
    return ds.NumpySlicesDataset({"x": x, "y": y}, shuffle=False).batch(BATCH)


def model_for(grad_freeze, seed=0, **sections):
    """A Model over a fresh MLP with gradient freezing (2 groups) from ``grad_freeze``; ``sections`` are further
    config sections (a "boost" section is merged into the switches)."""
    net = mlp(seed)
    config = {"level": "O0", **sections, "boost": {"mode": "manual", "grad_freeze": True, **sections.get("boost", {})},
              "grad_freeze": {"param_groups": 2, **grad_freeze}}
    loss = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")
    return net, Model(net, loss, nn.Momentum(net.trainable_params(), 0.1, 0.9), boost_config_dict=config)


def total_steps(model):
    return model.boost.config.section("grad_freeze")["total_steps"]


class FrontChanges(Callback):
    """Whether each step changed the first Dense's weight (False: a step that froze the front group)."""

    def __init__(self, net):
        super().__init__()
        self.net, self.last, self.changed = net, net[0].weight.asnumpy().copy(), []

    def on_train_step_end(self, run_context):
        weight = self.net[0].weight.asnumpy().copy()
        self.changed.append(not np.array_equal(weight, self.last))
        self.last = weight


class StateAt(Callback):
    """Every Parameter of the train network at the end of epoch ``epoch``, as a checkpoint holds them."""

    def __init__(self, epoch):
        super().__init__()
        self.epoch, self.saved = epoch, None

    def on_train_epoch_end(self, run_context):
        params = run_context.original_args()
        if params.cur_epoch_num == self.epoch:
            self.saved = {p.name: p.asnumpy().copy() for p in params.train_network.get_parameters()}


def boost_warnings(record):
    return [str(w.message) for w in record if issubclass(w.category, BoostConfigWarning)]


def test_left_out_total_steps_comes_from_the_run(recwarn):
    """Progressive at freeze_p 0.5 over 2 epochs of 4 steps: total_steps 8, so updates 1-4 train every group and
    5-8 the head only; the same train cell follows the plan made for 8 updates; nothing warns."""
    net, model = model_for({"freeze_type": 2, "freeze_p": 0.5})
    built = model.train_network
    changes = FrontChanges(net)
    model.train(2, dataset(), callbacks=[changes])
    assert total_steps(model) == 8
    assert model.train_network is built
    assert model.train_network.freeze_plan.sequence == tuple(freeze_index_sequence(2, 2, 0.5, 8))
    freeze_opt = model.train_network.optimizer  # the suffix optimizers hold the fitted plan, no copy of another run
    assert freeze_opt.plan is model.train_network.freeze_plan
    assert freeze_opt.train_strategy.asnumpy().tolist() == list(freeze_opt.plan.sequence)
    assert changes.changed == [True] * 4 + [False] * 4
    assert boost_warnings(recwarn) == []


@pytest.mark.slow  # over 3 s alone
def test_the_run_counts_updates_and_the_steps_an_epoch_really_runs(monkeypatch):
    """Accumulation over 2 micro-steps halves the updates; sink mode on CPU runs the whole dataset each epoch (as
    MindSpore falls back to non-sink mode there), on GPU/Ascend sink_size steps an epoch."""
    _, model = model_for({"freeze_type": 1, "freeze_p": 0.5}, boost={"grad_accumulation": True},
                         grad_accumulation={"grad_accumulation_step": 2})
    model.train(3, dataset(), dataset_sink_mode=True, sink_size=2)
    assert total_steps(model) == 3 * STEPS // 2
    _, model = model_for({"freeze_type": 1, "freeze_p": 0.5})
    monkeypatch.setattr(boost_cells.model, "device_target", lambda: "GPU")  # MindSpore itself still sees the CPU
    model.train(3, dataset(), dataset_sink_mode=True, sink_size=2)
    assert total_steps(model) == 3 * 2


def test_a_resumed_run_gets_the_schedule_and_the_state_of_the_uninterrupted_one():
    """Progressive at freeze_p 0.75 over 2 epochs (total_steps 8: freezing from update 7). A run resumed at epoch 1
    from the state after epoch 1, loaded into the train network before train (docs/reliability.md's recipe), ends
    bit-identical to the uninterrupted one: its schedule is the whole run's, not its 4 remaining updates' (which
    would freeze from the resume on), and fitting it kept the loaded position."""
    net, model = model_for({"freeze_type": 2, "freeze_p": 0.75})
    changes, checkpoint = FrontChanges(net), StateAt(1)
    model.train(2, dataset(), callbacks=[changes, checkpoint])
    assert changes.changed == [True] * 6 + [False] * 2

    resumed_net, resumed = model_for({"freeze_type": 2, "freeze_p": 0.75}, seed=1)
    loaded = {name: Parameter(Tensor(value), name=name) for name, value in checkpoint.saved.items()}
    assert ms.load_param_into_net(resumed.train_network, loaded, strict_load=True) == ([], [])
    resumed_changes = FrontChanges(resumed_net)
    resumed.train(2, dataset(), callbacks=[resumed_changes], initial_epoch=1)
    assert resumed_changes.changed == [True] * 2 + [False] * 2
    expected = {p.name: p.asnumpy() for p in model.train_network.get_parameters()}
    ended = {p.name: p.asnumpy() for p in resumed.train_network.get_parameters()}
    assert ended.keys() == expected.keys() and int(ended["grad_freeze.position"]) == 7
    for name, value in expected.items():
        np.testing.assert_array_equal(ended[name], value, err_msg=name)


@pytest.mark.parametrize("grad_freeze, fragments", [
    ({"freeze_type": 2, "freeze_p": 0.5, "total_steps": 100},
     ["= 100 updates, but the run has 8 (2 epochs of 4 steps)", "for its first 50 updates, so freezing never starts",
      "Drawn for 8 updates, it would start freezing at update 5", "set it to 8"]),
    ({"freeze_type": 2, "freeze_p": 0.5, "total_steps": 4},
     ["starts freezing at update 3 and reaches its deepest stage (training from group 1 on) at update 3",
      "the run's last 6 updates all train that stage", "would start freezing at update 5"]),
    ({"freeze_type": 2, "freeze_p": 0.25, "total_steps": 16},
     ["starts freezing at update 5 and reaches its deepest stage (training from group 1 on) at update 5.",
      "would start freezing at update 3"]),
    ({"freeze_type": 1, "freeze_p": 0.5, "total_steps": 4},
     ["Freezing starts at update 2 all the same", "about 1 - freeze_p = 0.5 of the steps",
      "int(4 * 1.01) = 4 updates is shorter than the run: after update 4", "same pattern of frozen steps 2.0 times"]),
    ({"freeze_type": 1, "freeze_p": 0.5, "total_steps": 100},
     ["Freezing starts at update 2 all the same", "uses only the first 8 of its int(100 * 1.01) = 101 entries"]),
    ({"freeze_type": "auto", "total_steps": 100, "payback": False},
     ["= 100 updates, but the run has 8", "decides every 5 updates and freezes nothing before update 11, so freezing "
      "never starts in this run", "Made for 8 updates, it would decide every update from update 3"]),
    ({"freeze_type": "auto", "total_steps": 4, "auto_interval_share": 0.25, "auto_warmup_share": 0.5,
      "payback": False},
     ["decides every update and freezes nothing before update 3, 25% into this run rather than 50%",
      "Made for 8 updates, it would decide every 2 updates from update 5"]),
])
def test_a_given_total_steps_that_differs_from_the_run_warns_when_freezing_starts(grad_freeze, fragments):
    """The schedule stays as given (no rebuild); one BoostConfigWarning at the user's line names the numbers (the
    automatic schedule's payback, whose own warning on so short a run tests/test_payback.py checks, left out)."""
    _, model = model_for(grad_freeze)
    built = model.train_network
    with pytest.warns(BoostConfigWarning) as record:
        model.train(2, dataset())
    messages = boost_warnings(record)
    assert len(messages) == 1, messages
    for fragment in fragments:
        assert fragment in messages[0], messages[0]
    assert [w.filename for w in record if issubclass(w.category, BoostConfigWarning)] == [__file__]
    assert model.train_network is built and total_steps(model) == grad_freeze["total_steps"]


def test_a_matching_or_unneeded_step_count_is_silent_and_a_later_train_keeps_the_first_runs_schedule(recwarn):
    """A given total_steps equal to the run, and the continuous schedule (no step count), train without a warning. A second train on the same Model keeps the train cell the first one fitted (its state is
    training), and warns when its run has another length."""
    for grad_freeze in ({"freeze_type": 2, "freeze_p": 0.5, "total_steps": 8}, {"freeze_type": 0, "freeze_p": 0.5}):
        _, model = model_for(grad_freeze)
        built = model.train_network
        model.train(2, dataset())
        assert model.train_network is built
    assert boost_warnings(recwarn) == []
    _, model = model_for({"freeze_type": 2, "freeze_p": 0.5})
    model.train(1, dataset())
    fitted = model.train_network
    assert total_steps(model) == 4
    with pytest.warns(BoostConfigWarning, match="made for 'grad_freeze.total_steps' = 4 updates, but the run has 8"):
        model.train(2, dataset(), initial_epoch=1)
    assert model.train_network is fitted and total_steps(model) == 4


def test_a_run_that_ends_before_the_deepest_stage_is_told_so():
    """4 groups, progressive at freeze_p 0.5 drawn for 100 updates, in a run of 60: freezing starts at update 51,
    the deepest stage (from group 3) would come at update 85."""
    section = {"freeze_type": 2, "param_groups": 4, "freeze_p": 0.5, "total_steps": 100, "seed": 0}
    assert ("starts freezing at update 51, but the run ends before its deepest stage (training from group 3 on), "
            "from update 85.") in run_differs(FreezePlan.from_section(section), 60)
