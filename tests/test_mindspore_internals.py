"""Pins, one test per wrapper, the MindSpore internals that boost_cells.mindspore_internals relies on.

A MindSpore upgrade that changes one of them fails here first, naming the internal, instead of somewhere inside a
train cell."""
import dataclasses
import os

import mindspore as ms
import numpy as np
import pytest
from mindspore import Parameter, Tensor, nn, ops
from mindspore.common import dtype as mstype
from mindspore.train.loss_scale_manager import DynamicLossScaleManager, FixedLossScaleManager

from boost_cells import mindspore_internals as internals
from tests.helpers import Linear


class _Counting(nn.Cell):
    """A leaf cell that counts the compile_phase values pushed down to it."""

    def __init__(self):
        super().__init__()
        self.dense = nn.Dense(3, 2)
        self.pushed = []

    @property
    def compile_phase(self):
        return self._compile_phase

    @compile_phase.setter
    def compile_phase(self, value):
        self.pushed.append(value)
        nn.Cell.compile_phase.fset(self, value)

    def construct(self, x):
        return self.dense(x)


class _Plain(nn.Cell):
    def __init__(self):
        super().__init__()
        self.inner = _Counting()

    def construct(self, x):
        return self.inner(x) * 2


class _Skipping(internals.SkipUnchangedCompilePhase, _Plain):
    pass


def test_compile_phase_is_set_on_every_graph_call_and_walks_the_tree(graph_mode):
    """nn.Cell: each GRAPH_MODE call sets compile_phase, and the setter pushes it to every sub-cell; with the mixin
    an unchanged phase is not pushed again, a new one (new shape) is, and the outputs stay right."""
    plain, skipping = _Plain(), _Skipping()
    skipping.inner.dense.weight.set_data(plain.inner.dense.weight.value())
    skipping.inner.dense.bias.set_data(plain.inner.dense.bias.value())
    for n in (4, 4, 4, 2, 2, 4):
        x = Tensor(np.full((n, 3), float(n), np.float32))
        np.testing.assert_array_equal(skipping(x).asnumpy(), plain(x).asnumpy())
    assert len(plain.inner.pushed) == 6 and len(set(plain.inner.pushed)) == 2
    assert len(skipping.inner.pushed) == 3 and len(set(skipping.inner.pushed)) == 2
    assert skipping.inner.pushed[-1] == skipping.compile_phase


def test_auto_prefix_flag():
    """nn.Cell keeps auto_prefix in ``_auto_prefix``: children's parameters get the attribute name or not."""
    class Holder(nn.Cell):
        def __init__(self, auto_prefix):
            super().__init__(auto_prefix=auto_prefix)
            self.child = nn.Dense(2, 2)

    with_prefix, without = Holder(True), Holder(False)
    assert internals.prefixes_child_names(with_prefix) and not internals.prefixes_child_names(without)
    assert with_prefix.child.weight.name == "child.weight" and without.child.weight.name == "weight"


@pytest.mark.parametrize("dtype", [mstype.float16, mstype.bfloat16, mstype.float32])
def test_to_float_marks_cells_by_flags(dtype):
    """Cell.to_float(dtype) calls add_flags_recursive with fp16/bf16/fp32 flags on every cell; a cell that passes
    on keep_float32's flags (float32_flags) stays float32 while its siblings take the dtype, and records the dtype
    asked for in output_dtype (None for float32)."""
    seen = []

    class StaysFloat32(nn.Cell):
        def add_flags_recursive(self, **flags):
            seen.append(internals.to_float_request(flags))
            return super().add_flags_recursive(**internals.keep_float32(self, flags))

    net = nn.SequentialCell([nn.Dense(2, 2), StaysFloat32()])
    net.to_float(dtype)
    assert seen == [dtype]
    assert net[1].get_flags()["fp32"] and not net[1].get_flags()["fp16"]
    assert net[1].output_dtype == (None if dtype == mstype.float32 else dtype)
    assert net[0].get_flags()["fp16"] == (dtype == mstype.float16)
    assert net[0].get_flags()["bf16"] == (dtype == mstype.bfloat16)
    assert internals.to_float_request({"defer_inline": True}) is None


def test_listed_parameters_are_recorded_until_forgotten():
    """Cell.__setattr__ records the Parameters of a plain list in exist_objs/exist_names and refuses another
    Parameter of a recorded name; forget_listed_parameter lets the list be swapped for one holding that name."""
    mine, theirs = Parameter(Tensor(1.0), name="lr"), Parameter(Tensor(2.0), name="lr")
    refusing, forgetting = nn.Cell(), nn.Cell()
    refusing.group = [mine]
    assert mine in refusing.exist_objs and "lr" in refusing.exist_names
    with pytest.raises(ValueError, match="already exists"):
        refusing.group = [theirs]
    forgetting.group = [mine]
    internals.forget_listed_parameter(forgetting, mine)
    internals.forget_listed_parameter(forgetting, mine)  # no longer recorded: nothing to forget
    forgetting.group = [theirs]
    assert forgetting.group[0] is theirs and theirs in forgetting.exist_objs and mine not in forgetting.exist_objs


def test_with_loss_cell_parts():
    """nn.WithLossCell keeps its arguments in _backbone and _loss_fn and computes loss_fn(backbone(data), label)."""
    net, loss = Linear(), nn.MSELoss()
    cell = nn.WithLossCell(net, loss)
    backbone, loss_fn = internals.with_loss_cell_parts(cell)
    assert backbone is net and loss_fn is loss and cell.backbone_network is net
    x, y = Tensor(np.ones((2, 4), np.float32)), Tensor(np.zeros((2, 3), np.float32))
    np.testing.assert_array_equal(cell(x, y).asnumpy(), loss_fn(backbone(x), y).asnumpy())


def test_sequential_cell_runs_its_cell_list_until_refreshed():
    """nn.SequentialCell.construct iterates ``cell_list``, which insert_child_to_cell does not refresh."""
    ms.set_context(mode=ms.PYNATIVE_MODE)
    seq = nn.SequentialCell([nn.ReLU()])
    seq.insert_child_to_cell("0", nn.Tanh())
    x = Tensor(np.array([-1.0, 1.0], np.float32))
    np.testing.assert_array_equal(seq(x).asnumpy(), [0.0, 1.0])  # still the ReLU
    assert internals.refresh_sequential_cell(seq) is seq
    np.testing.assert_allclose(seq(x).asnumpy(), np.tanh([-1.0, 1.0]), rtol=1e-6)


@pytest.mark.parametrize("kind", ["momentum", "adam_schedule", "lars"])
def test_optimizer_init_arguments_rebuild_the_optimizer(kind):
    """opt_init_args_register records init_params, init_learning_rate (None for a schedule) and init_args."""
    net = Linear()
    params = net.trainable_params()
    if kind == "momentum":
        opt = nn.Momentum(params, 0.1, 0.9, weight_decay=0.01, use_nesterov=True)
    elif kind == "adam_schedule":
        schedule = nn.ExponentialDecayLR(0.01, 0.9, 2)
        opt = nn.Adam(params, schedule, beta1=0.8)
    else:
        opt = nn.LARS(nn.Momentum(params, 0.1, 0.9), epsilon=1e-6, coefficient=0.002)
    got_params, learning_rate, kwargs = internals.optimizer_init_arguments(opt)
    assert got_params == params
    if kind == "momentum":
        assert learning_rate == 0.1 and kwargs["momentum"] == 0.9 and kwargs["weight_decay"] == 0.01
        assert kwargs["use_nesterov"] is True and "params" not in kwargs and "learning_rate" not in kwargs
        again = type(opt)(params[:1], learning_rate=learning_rate, **kwargs)
        assert again.use_nesterov and again.momentum.asnumpy() == np.float32(0.9)
    elif kind == "adam_schedule":
        assert opt.init_learning_rate is None and learning_rate is opt.learning_rate
        assert kwargs["beta1"] == 0.8
        assert isinstance(type(opt)(params, learning_rate=learning_rate, **kwargs).learning_rate, nn.Cell)
    else:
        assert kwargs == {"epsilon": 1e-6, "coefficient": 0.002, "use_clip": False,
                          "lars_filter": kwargs["lars_filter"]}


def test_row_tensor_in_graph_code(graph_mode):
    """RowTensorInner(indices, values, shape) builds a RowTensor inside graph code (sparse gradients)."""
    class Build(nn.Cell):
        def construct(self, indices, values):
            row = internals.make_row_tensor(indices, values * 2, (4, 2))
            return row.indices, row.values

    indices, values = Build()(Tensor([0, 2], mstype.int32), Tensor(np.ones((2, 2), np.float32)))
    np.testing.assert_array_equal(indices.asnumpy(), [0, 2])
    np.testing.assert_array_equal(values.asnumpy(), np.full((2, 2), 2.0))


def test_ascend_soc_feature_query():
    """MSContext answers ascend_soc_supports_feature("train_hq_dtype_line") with a bool, on any target; off Ascend
    no SoC has it, so the float-status register would be used (the question is only asked on Ascend)."""
    from mindspore._c_expression import MSContext  # pylint: disable=import-outside-toplevel
    answer = MSContext.get_instance().ascend_soc_supports_feature("train_hq_dtype_line")
    assert isinstance(answer, bool)
    saturation = os.environ.get("MS_ASCEND_CHECK_OVERFLOW_MODE") == "SATURATION_MODE"
    assert internals.ascend_uses_float_status() is (saturation if answer else True)


def test_npu_float_status_primitives():
    """NPUClearFloatStatusV2 and NPUGetFloatStatusV2 are Primitives in mindspore.ops.operations.math_ops (a CPU
    machine can build them, not run them)."""
    clear, get = internals.npu_clear_float_status(), internals.npu_get_float_status()
    assert isinstance(clear, ops.Primitive) and isinstance(get, ops.Primitive)
    assert (clear.name, get.name) == ("NPUClearFloatStatusV2", "NPUGetFloatStatusV2")


class _RaisesInForward(nn.Cell):
    def __init__(self):
        super().__init__()
        self.dense = nn.Dense(2, 2)

    def construct(self, x, fail):
        if fail:
            raise ValueError("planted")
        return self.dense(x)[0].sum()


def test_reset_pynative_executor_after_a_raising_grad_forward():
    """clear_res() closes the grad graph a PyNative forward pass left open when it raised, so the next grad step
    (which indexes a Tensor by an int) runs again."""
    from mindspore.graph.api import _pynative_executor  # pylint: disable=import-outside-toplevel
    ms.set_context(mode=ms.PYNATIVE_MODE)
    net, x = _RaisesInForward(), Tensor(np.ones((3, 2), np.float32))
    grad = ops.GradOperation(get_by_list=True)
    with pytest.raises(ValueError, match="planted"):
        grad(net, net.trainable_params())(x, True)
    internals.reset_pynative_executor()
    assert not _pynative_executor.grad_flag()
    grads = grad(net, net.trainable_params())(x, False)
    np.testing.assert_array_equal(grads[1].asnumpy(), [1.0, 1.0])


def test_existing_communication_groups_are_recorded(monkeypatch):
    """create_group consults _ExistingGroup.ITEMS before the backend: a recorded name with the same ranks returns at
    once, with other ranks it raises (no backend is reached, so this runs without a real init())."""
    from mindspore.communication import GlobalComm, create_group  # pylint: disable=import-outside-toplevel
    from mindspore.communication._comm_helper import _ExistingGroup  # pylint: disable=import-outside-toplevel
    name = "boost_cells_pin_group"
    assert not internals.communication_group_exists(name)
    monkeypatch.setitem(_ExistingGroup.ITEMS, name, [0, 1])
    monkeypatch.setattr(GlobalComm, "INITED", True)  # create_group's helper checks init() before the record
    assert internals.communication_group_exists(name)
    assert create_group(name, [0, 1]) is None
    with pytest.raises(ValueError, match="has been created"):
        create_group(name, [0, 2])


@pytest.mark.parametrize("level", ["O0", "O2", "O3"])
def test_amp_network_steps(level):
    """mindspore.train.amp's private steps: the level's cast, the loss wrapper and the default manager, as
    mindspore.amp.build_train_network applies them; a bad level or keyword raises."""
    net = Linear()
    network, manager = internals.amp_network(net, nn.MSELoss(), level)
    assert network._backbone is net  # pylint: disable=protected-access
    assert bool(net.fc.get_flags().get("fp16")) == (level != "O0")
    assert isinstance(manager, DynamicLossScaleManager) if level == "O2" else manager is None
    fixed = FixedLossScaleManager(8.0)
    assert internals.amp_network(Linear(), None, level, loss_scale_manager=fixed)[1] is fixed
    with pytest.raises(ValueError):
        internals.amp_network(Linear(), None, "O4")
    with pytest.raises(ValueError, match="Unsupported arg"):
        internals.amp_network(Linear(), None, level, boost_level="O1")


def test_model_calls_the_build_hooks_with_its_parts():
    """Model.__init__ keeps its arguments in private attributes and calls _build_boost_network(kwargs), then
    _build_train_network(); what the boost hook returns is what the train builder and the eval network use."""
    calls = []
    net, other_eval = Linear(), Linear(seed=1)
    loss = nn.MSELoss()
    opt = nn.SGD(net.trainable_params(), 0.1)
    manager = FixedLossScaleManager(4.0)

    class Probe(internals.ModelBuildHooks):
        def build_boost(self, parts, kwargs):
            calls.append(("boost", parts, dict(kwargs)))
            return dataclasses.replace(parts, eval_network=other_eval, boost_level="O1")

        def build_train(self, parts):
            calls.append(("train", parts))
            return nn.TrainOneStepCell(nn.WithLossCell(parts.network, parts.loss_fn), parts.optimizer)

    model = Probe(net, loss, opt, eval_network=Linear(seed=2), amp_level="O0", loss_scale_manager=manager,
                  keep_batchnorm_fp32=False, boost_config_dict={"level": "O0"})
    assert [call[0] for call in calls] == ["boost", "train"]
    boost_parts, kwargs = calls[0][1], calls[0][2]
    assert (boost_parts.network, boost_parts.loss_fn, boost_parts.optimizer) == (net, loss, opt)
    assert boost_parts.amp_level == "O0" and boost_parts.boost_level == "O0"
    assert boost_parts.amp_kwargs == {"loss_scale_manager": manager, "keep_batchnorm_fp32": False}
    assert kwargs["boost_config_dict"] == {"level": "O0"}
    assert calls[1][1].eval_network is other_eval and calls[1][1].boost_level == "O1"
    assert model.eval_network is other_eval and isinstance(model.train_network, nn.TrainOneStepCell)


def test_model_default_train_builder_is_mindspores():
    """build_train returning None keeps MindSpore's own builder (the network with loss without an optimizer)."""
    model = internals.ModelBuildHooks(Linear(), nn.MSELoss())
    assert isinstance(model.train_network, nn.WithLossCell)


def _first_step_params(model):
    """The ``cb_params`` that ``model.train`` hands its callbacks at the end of its first step (one step of one
    epoch)."""
    seen = []

    class Seen(ms.train.Callback):
        def on_train_step_end(self, run_context):
            seen.append(run_context.original_args())

    x, y = np.ones((2, 4), np.float32), np.zeros((2, 3), np.float32)
    model.train(1, ms.dataset.NumpySlicesDataset({"x": x, "y": y}, shuffle=False).batch(2), callbacks=[Seen()])
    return seen[0]


def test_model_optimizer_is_the_one_train_hands_its_callbacks():
    """Model keeps the optimizer (after the boost transform) in _optimizer (None without one), and train hands it
    to its callbacks."""
    net = Linear()
    assert internals.model_optimizer(internals.ModelBuildHooks(net, nn.MSELoss())) is None
    given, boosted = nn.SGD(net.trainable_params(), 0.1), nn.SGD(net.trainable_params(), 0.0)

    class Boosting(internals.ModelBuildHooks):
        def build_boost(self, parts, kwargs):
            return dataclasses.replace(parts, optimizer=boosted)

    model = Boosting(net, nn.MSELoss(), given)
    assert internals.model_optimizer(model) is boosted
    assert _first_step_params(model).optimizer is boosted
