"""The frozen-prefix cache (``grad_freeze.cache_frozen_prefix``): training on cached outputs equals freezing
without the cache, and a cached output is never stale (shuffled order, augmentation, a checkpoint load, a changed
prefix, a growing prefix). Stages keep parameter names."""
import json
import sys
import warnings
from pathlib import Path

import numpy as np
import mindspore as ms
import pytest
from mindspore import Parameter, Tensor, nn, ops

import boost_cells.model
from boost_cells import BoostConfig, BoostConfigWarning, BoostTrainOneStepCell, Model, build_train_network
from boost_cells.freezing import FrozenPrefixCache, GradientFreeze, PrefixSnapshot, Stages, split_stages, staged_network
from boost_cells.freezing.host.prefix_cache import fingerprints
from tests.helpers import DataWrapperStandIn, freeze_config, weights_of

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "examples"))
from train import resnet  # noqa: E402  pylint: disable=wrong-import-position

LOSS = nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")


def staged_net(seed=0, batch_norm=True):
    """conv(-BN)-ReLU, conv(-BN)-ReLU, pool+flatten, dense: four stages on (N, 1, 8, 8) inputs, 10 logits."""
    ms.set_seed(seed)

    def conv(cin, cout):
        return nn.SequentialCell([nn.Conv2d(cin, cout, 3)] + ([nn.BatchNorm2d(cout)] if batch_norm else [])
                                 + [nn.ReLU()])

    return nn.SequentialCell([conv(1, 4), conv(4, 8), nn.SequentialCell([nn.AdaptiveAvgPool2d(1), nn.Flatten()]),
                              nn.Dense(8, 10)])


def data(n=24, seed=1):
    rng = np.random.RandomState(seed)
    return rng.rand(n, 1, 8, 8).astype(np.float32), rng.randint(0, 10, n).astype(np.int32)


def cache_config(cache=True, freeze_type=2, **grad_freeze):
    """Progressive freezing of 3 groups (stem, second conv, head) over 10 steps: trains everything for steps 0-2,
    from group 1 for steps 3-5 (the first stage frozen for good) and from group 2 from step 6 on."""
    config = freeze_config(param_groups=3, freeze_type=freeze_type, freeze_p=0.3, total_steps=10)
    config["grad_freeze"].update(cache_frozen_prefix=cache, **grad_freeze)
    return config


def stage_groups_optimizer(net):
    """The config's FreezeOpt (groups at stage boundaries), so runs with and without the cache freeze alike."""
    section = BoostConfig.from_dict(cache_config()).section("grad_freeze")
    return GradientFreeze(**section).freeze_generate(net, nn.Momentum(net.trainable_params(), 0.1, 0.9))[1]


def batches(steps, n=24, rows=8):
    """Shuffled batches of ``rows`` sample indices over ``n`` samples: samples repeat, in changing order."""
    return [np.random.RandomState(step).permutation(n)[:rows] for step in range(steps)]


def train(cell, x, y, steps):
    cell.set_train()
    for rows in batches(steps):
        cell(Tensor(x[rows]), Tensor(y[rows]))


def test_stages_keep_names_and_cells():
    net = staged_net()
    names = [p.name for p in net.get_parameters()]
    prefix, suffix = split_stages(net, 2)
    assert [p.name for p in prefix.get_parameters()] + [p.name for p in suffix.get_parameters()] == names
    assert [p.name for p in net.get_parameters()] == names
    assert list(prefix)[0] is list(net)[0] and list(suffix)[-1] is list(net)[-1]
    staged = staged_network(nn.WithLossCell(net, LOSS))
    assert staged.loss_fn is LOSS and staged.stages == list(net)
    assert [p.name for p in staged.suffix_with_loss(3).trainable_params()] == ["3.weight", "3.bias"]


@pytest.mark.parametrize("scaled", [False, True], ids=["plain", "loss_scale"])
def test_cached_training_equals_freezing_without_cache(mode, scaled):
    """Without BatchNorm in the prefix, inference and training mode agree, so training on cached prefix outputs
    must equal freezing alone bit for bit: progressive schedule (the prefix grows from 0 to 1 to 2 stages), both
    modes, plain and loss-scaled; the cache served repeated samples (hits) and the schedule position matches."""
    x, y = data()
    results = []
    for cache in (True, False):
        net = staged_net(batch_norm=False)
        config = cache_config(cache)
        if scaled:
            config["loss_scale"] = {"type": "dynamic", "init": 1024.0, "window": 3}
        cell = build_train_network(nn.WithLossCell(net, LOSS), stage_groups_optimizer(net), config)
        train(cell, x, y, 12)
        results.append((weights_of(net), int(cell.train_step.schedule.position.asnumpy()), cell.prefix_cache))
        if scaled:
            results[-1] += (float(cell.scale_sense.asnumpy()),)
    (cached, position, cache, *scale), (plain, plain_position, no_cache, *plain_scale) = results
    assert no_cache is None and cache.hits > 0 and cache.misses > 0
    assert position == plain_position and scale == plain_scale
    for name, value in plain.items():
        np.testing.assert_array_equal(cached[name], value, err_msg=name)


@pytest.mark.slow  # over 3 s alone
def test_prefix_runs_in_inference_mode_and_stays_unchanged(graph_mode):
    """With BatchNorm: once frozen for good, the prefix (weights and moving statistics) never changes, and the
    cached outputs are the prefix's inference-mode outputs."""
    x, y = data()
    net = staged_net()
    cell = build_train_network(nn.WithLossCell(net, LOSS), nn.Momentum(net.trainable_params(), 0.1, 0.9),
                               cache_config())
    train(cell, x, y, 7)  # step 6 trains from group 2 (the head): stages 0-2 frozen (2 has no parameters)
    prefix = Stages(list(net)[:3])
    frozen = {p.name: p.asnumpy().copy() for p in prefix.get_parameters()}
    train(cell, x, y, 12)
    for param in prefix.get_parameters():
        np.testing.assert_array_equal(param.asnumpy(), frozen[param.name], err_msg=param.name)
    prefix.set_train(False)
    np.testing.assert_array_equal(cell.prefix_cache(x[:8], 2), prefix(Tensor(x[:8])).asnumpy())


def small_cache():
    """A cache over the prefix of a fresh staged network: segment 0 = stage 0, segment 1 = stage 1; records the
    ((first segment, last segment + 1), rows) of every run (a run takes just its rows through the segments it
    needs, in one graph per span of segments, any batch size)."""
    net = staged_net()
    stages = list(net)
    cache = FrozenPrefixCache([Stages(stages[:1]), Stages(stages[1:2])], max_bytes=2 ** 30)
    runs = []
    run = cache._run  # pylint: disable=protected-access

    def recording(span, rows):
        runs.append((next(key for key, cell in cache.spans.items() if cell is span), len(rows)))
        return run(span, rows)

    cache._run = recording  # pylint: disable=protected-access
    return net, cache, runs


def fresh(net, x, level):
    prefix = Stages(list(net)[:level])
    prefix.set_train(False)
    return prefix(Tensor(x)).asnumpy()


def test_shuffled_order_hits_and_augmentation_misses(graph_mode):
    net, cache, runs = small_cache()
    x, _ = data()
    first = cache(x[:8], 1)
    np.testing.assert_array_equal(first, fresh(net, x[:8], 1))
    order = np.random.RandomState(3).permutation(8)
    assert np.array_equal(cache(x[order], 1), first[order]) and cache.hits == 8 and runs == [((0, 1), 8)]
    augmented = x[:8].copy()
    augmented[2] = augmented[2, :, ::-1]  # one sample flipped: a new input
    served = cache(augmented, 1)
    assert cache.misses == 9 and runs[-1] == ((0, 1), 1)
    np.testing.assert_array_equal(served, fresh(net, augmented, 1))


def test_checkpoint_load_and_changed_prefix_recompute(graph_mode):
    """A checkpoint load into the prefix, or a training-mode forward pass (BatchNorm moving statistics move),
    drops the cache with a warning; what it serves then equals the changed prefix's outputs."""
    net, cache, runs = small_cache()
    x, _ = data()
    cache(x[:8], 1)
    other = staged_net(seed=5)
    ms.load_param_into_net(net, {p.name: p for p in list(other)[0].get_parameters()})
    with pytest.warns(RuntimeWarning, match="frozen prefix changed"):
        served = cache(x[:8], 1)
    np.testing.assert_array_equal(served, fresh(net, x[:8], 1))
    net.set_train(True)
    net(Tensor(x[8:16]))  # updates the stem's BatchNorm moving statistics
    with pytest.warns(RuntimeWarning, match="frozen prefix changed"):
        served = cache(x[:8], 1)
    np.testing.assert_array_equal(served, fresh(net, x[:8], 1))
    assert runs == [((0, 1), 8)] * 3
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        cache(x[:8], 1)  # unchanged since: served from the cache, no warning
    assert runs == [((0, 1), 8)] * 3


class Holder(nn.Cell):
    """A segment of Parameters only: float32 and float16 ones (each dtype flattened apart), and an int32 one."""

    def __init__(self, tag):
        super().__init__()
        self.weight = Parameter(Tensor(np.arange(6, dtype=np.float32).reshape(2, 3)), name=f"{tag}.weight")
        self.half = Parameter(Tensor(np.ones(4, np.float16)), name=f"{tag}.half")
        self.count = Parameter(Tensor(np.array([3], np.int32)), name=f"{tag}.count", requires_grad=False)
        self.bias = Parameter(Tensor(np.zeros(3, np.float32)), name=f"{tag}.bias")


def test_the_snapshot_flags_exactly_the_segments_that_changed(mode):
    """``PrefixSnapshot`` compares each segment with its copy, every Parameter whatever its dtype: one changed
    element of one Parameter clears that segment's flag only, a NaN counts as a change (it never equals itself),
    and a segment whose copy is taken again is equal again."""
    segments = [Holder("a"), Holder("b")]
    snapshot = PrefixSnapshot(segments)
    for segment in range(2):
        snapshot.take(segment)
    assert snapshot().asnumpy().tolist() == [True, True]
    for name, value in (("bias", np.array([0, 0, 1], np.float32)), ("half", np.array([1, 1, 1, 2], np.float16)),
                        ("count", np.array([4], np.int32)), ("weight", np.full((2, 3), np.nan, np.float32))):
        ops.assign(getattr(segments[1], name), Tensor(value))
        assert snapshot().asnumpy().tolist() == [True, False], name
        snapshot.take(1)
        assert snapshot().asnumpy().tolist() == [True, name != "weight"], name  # NaN: never equal
    ops.assign(segments[0].count, Tensor(np.array([5], np.int32)))
    assert snapshot().asnumpy().tolist() == [False, False]


def test_growing_prefix_extends_through_new_stages_only(graph_mode):
    net, cache, runs = small_cache()
    x, _ = data()
    cache(x[:8], 1)
    grown = cache(x[4:12], 2)  # rows 4-7 extended from level 1, rows 8-11 computed from the input
    assert runs[1:] == [((1, 2), 4), ((0, 2), 4)]  # the cached rows through segment 1, the new ones through both
    np.testing.assert_allclose(grown, fresh(net, x[4:12], 2), rtol=1e-6, atol=1e-6)
    runs.clear()
    cache(x[:4], 2)  # rows 0-3 are still at level 1: segment 1 only
    assert runs == [((1, 2), 4)]


def test_exchange_stores_what_other_ranks_computed(graph_mode):
    """A call's ``exchange`` (a stand-in for the route's AllGather: what a second rank computed is appended to this
    rank's) receives the digests and outputs of the rows this call computed only; afterwards the other rank's samples
    are served without running the prefix, equal to what running it gives, and a sample already cached at the level
    is not replaced."""
    net, cache, runs = small_cache()
    x, _ = data()
    cache(x[:4], 1)
    other = fresh(net, x[8:12], 1)
    other_digests = np.stack([np.frombuffer(digest, np.uint8) for _, digest in fingerprints(x[8:12])])
    sent = []

    def exchange(digests, rows):
        sent.append((digests.copy(), rows.copy()))
        clash = np.zeros_like(rows[:1])  # a second answer for a sample this rank cached at call 1
        first_digest = np.frombuffer(fingerprints(x[:1])[0][1], np.uint8)[None]
        return np.concatenate([digests, other_digests, first_digest]), np.concatenate([rows, other, clash])

    served = cache(x[2:6], 1, exchange)  # rows 2-3 cached, 4-5 computed
    assert [len(digests) for digests, _ in sent] == [2]
    np.testing.assert_array_equal(sent[0][1], served[2:])
    assert sent[0][0].tolist() == [list(np.frombuffer(d, np.uint8)) for _, d in fingerprints(x[4:6])]
    assert cache.received == 4
    runs.clear()
    np.testing.assert_array_equal(cache(x[8:12], 1), other)
    np.testing.assert_array_equal(cache(x[:1], 1), fresh(net, x[:1], 1))
    assert runs == [] and cache.hits == 2 + 4 + 1


def test_full_cache_computes_and_warns_once(graph_mode):
    net = staged_net()
    cache = FrozenPrefixCache([Stages(list(net)[:1])], max_bytes=3 * 4 * 8 * 8 * 4)  # 3 float32 outputs (4, 8, 8)
    x, _ = data()
    with pytest.warns(RuntimeWarning, match="cache is full"):
        served = cache(x[:8], 1)
    np.testing.assert_array_equal(served, fresh(net, x[:8], 1))
    assert len(cache.entries) == 3
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        cache(x[:8], 1)
    assert cache.hits == 3


@pytest.mark.slow  # over 3 s alone
def test_auto_schedule_caches_and_model_train_feeds_it(graph_mode):
    """Through ``Model.train`` (non-sink) with the automatic schedule: the stem freezes for good at the end of
    epoch 1 (4 updates), so epochs 2 and 3 (the same 32 samples, reshuffled) are served from the cache (filled in
    epoch 2, hit in epoch 3) and the stem stays put."""
    x, y = data(32)
    net = staged_net()
    config = cache_config(freeze_type="auto", param_groups=2, auto_interval_share=1 / 6, auto_warmup_share=1 / 6,
                          auto_threshold=1000, auto_loss_drop=0.0, auto_loss_last_fall=1.0)
    del config["grad_freeze"]["total_steps"]  # Model.train sets it: 3 epochs of 4 steps, deciding every 2 updates
    model = Model(net, LOSS, nn.Momentum(net.trainable_params(), 0.01, 0.9), boost_level="O0",
                  boost_config_dict=config)
    dataset = ms.dataset.NumpySlicesDataset({"image": x, "label": y}, shuffle=True).batch(8)
    seen = []

    class Snapshot(ms.train.Callback):
        def on_train_epoch_end(self, run_context):
            cell = run_context.original_args().train_network
            cache = cell.prefix_cache
            seen.append((cell.train_step.frozen_for_good(), cache.hits, cache.misses,
                         {p.name: p.asnumpy().copy() for p in list(net)[0].get_parameters()}))

    model.train(3, dataset, callbacks=[Snapshot()], dataset_sink_mode=False)
    assert [s[:3] for s in seen] == [(1, 0, 0), (1, 0, 32), (1, 32, 32)]
    for name, value in seen[0][3].items():
        np.testing.assert_array_equal(seen[2][3][name], value, err_msg=name)


@pytest.mark.slow  # the shipped O1 config trained through Model
def test_sink_mode_trains_the_o1_config_with_its_cache_on_without_the_cache(graph_mode, monkeypatch):
    """``Model.train(..., dataset_sink_mode=True)`` on GPU or Ascend with configs/O1.json, its cache and LessBN
    switched on: the cache and payback, which need the host between steps, step aside with one warning naming both
    keys, and the same train network (not rebuilt) freezes in the graph, the whole front's level alone allowed.
    Stand-ins: no GPU here, so the device target boost_cells reads is patched to "GPU" (MindSpore itself, seeing
    CPU, then trains in non-sink mode); the cell, which holds
    its two steps (every group, the head alone) in its switch, is then run nested in a ``_DataWrapper``-shaped cell,
    as sink mode runs it: it compiles there and its schedule advances in the graph (that a nested schedule freezes
    exactly as a direct one is tests/test_auto_freeze.py's)."""
    ms.set_seed(0)
    net = resnet(width=4, blocks=1)
    x = np.random.RandomState(0).rand(64, 1, 8, 8).astype(np.float32)
    y = (x.mean(axis=(1, 2, 3)) * 20).astype(np.int32) % 10
    config = json.loads((ROOT / "configs" / "O1.json").read_text())
    config["grad_freeze"]["cache_frozen_prefix"] = True
    config["boost"]["less_bn"] = True  # the bare level's LessBN too, so the cache finds its stages through LessBN
    model = Model(net, LOSS, nn.Momentum(net.trainable_params(), 0.05, 0.9), boost_level="O1",
                  boost_config_dict=config)
    built = model.train_network
    assert built.prefix_cache is not None and built.level_route.active
    monkeypatch.setattr(boost_cells.model, "device_target", lambda: "GPU")
    dataset = ms.dataset.NumpySlicesDataset({"image": x, "label": y}, shuffle=False).batch(16)
    with pytest.warns(BoostConfigWarning, match="'grad_freeze.cache_frozen_prefix' and 'grad_freeze.payback' are left "
                                                "out in dataset sink mode on GPU"):
        model.train(1, dataset, dataset_sink_mode=True)
    cell = model.train_network
    assert cell is built and not cell.level_route.active and cell.active_hooks == []
    section = model.boost.config.section("grad_freeze")
    assert not section["cache_frozen_prefix"] and not section["payback"]
    assert cell.train_step.schedule.allowed_levels() == (cell.freeze_plan.groups - 1,)  # the switch's level alone
    assert len(cell.train_step.steps) == len(cell.train_step.schedule.trained_from) == 2  # all groups; the head
    sink = DataWrapperStandIn(cell)
    schedule = cell.train_step.schedule
    for step in range(3):
        before = int(schedule.updates.asnumpy())
        sink(Tensor(x[:16]), Tensor(y[:16]))
        assert int(schedule.updates.asnumpy()) == before + 1  # the schedule advanced inside the outer graph
    assert schedule.displacement.asnumpy()[0] >= 0  # measured at a decision inside the outer graph


class EmaCell(BoostTrainOneStepCell):
    def construct(self, *inputs):
        return self.gradient_freeze_process(*inputs)


def test_errors_name_what_is_needed():
    class Unstaged(nn.Cell):
        def __init__(self):
            super().__init__()
            self.dense = nn.Dense(4, 2)

        def construct(self, x):
            return self.dense(x)

    unstaged = Unstaged()
    with pytest.raises(TypeError, match="'grad_freeze.cache_frozen_prefix' needs a network whose stages can be "
                                        "split: an nn.SequentialCell or boost_cells.Stages"):
        build_train_network(nn.WithLossCell(unstaged, LOSS), nn.Momentum(unstaged.trainable_params(), 0.1, 0.9),
                            cache_config())
    net = staged_net()
    with pytest.warns(BoostConfigWarning, match="For 'EmaCell', 'grad_freeze.cache_frozen_prefix' is left out"):
        cell = EmaCell(nn.WithLossCell(net, LOSS), nn.Momentum(net.trainable_params(), 0.1, 0.9),
                       boost_config=cache_config())
    assert cell.prefix_cache is None and len(cell.train_step.steps) == 3  # every suffix's step, in the graph
    with pytest.warns(UserWarning, match="never freezes a group for good"):
        build_train_network(nn.WithLossCell(net, LOSS), nn.Momentum(net.trainable_params(), 0.1, 0.9),
                            cache_config(freeze_type=1))
    with pytest.raises(ValueError, match="'grad_freeze.cache_max_mb' must be an int >= 1"):
        BoostConfig.from_dict(cache_config(cache_max_mb=0))
    with pytest.raises(ValueError, match=r"'index' must be an int in \[1, 3\]"):
        split_stages(net, 4)
    with pytest.raises(TypeError, match="non-empty list of Cells"):
        Stages([])
