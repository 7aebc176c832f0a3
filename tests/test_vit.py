"""bench/vit.py's vision transformer: its shapes, the freezing groups configs/O1.json cuts it into (at its stages),
and one O1 training step with Adam in PYNATIVE_MODE."""
import sys
from pathlib import Path

import numpy as np
import mindspore as ms
import pytest
from mindspore import Tensor, nn

from boost_cells import BoostConfig, build_train_network
from boost_cells.freezing.suffixes.groups import freeze_optimizer

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
from vit import vit  # noqa: E402  pylint: disable=wrong-import-position

O1 = BoostConfig.from_file(str(ROOT / "configs" / "O1.json"))


@pytest.fixture(autouse=True)
def pynative():
    ms.set_context(mode=ms.PYNATIVE_MODE)


def images(n=4, seed=0):
    return np.random.RandomState(seed).rand(n, 1, 16, 16).astype(np.float32)


def test_shapes_and_stages():
    """Digits upsampled to 16x16 give 10 logits; the network is 6 stages (embedding, 4 encoder layers, head), and
    the embedding turns 4x4 patches into 16 tokens of 64 features."""
    ms.set_seed(0)
    net = vit()
    assert isinstance(net, nn.SequentialCell) and len(net) == 6
    assert net[0](Tensor(images())).shape == (4, 16, 64)
    assert net(Tensor(images())).shape == (4, 10)
    with pytest.raises(ValueError, match="'image' must be a multiple of 'patch'"):
        vit(image=18)


def test_o1_groups_cut_at_stages():
    """configs/O1.json's 3 groups cut the 6 stages where the weights before a cut come nearest a third and two thirds
    of all (embedding 2 weights, each encoder layer 4, the head 1: cuts before layer 2 and layer 4), so the segments
    are embedding + layer 1, layers 2-3, layer 4 + head."""
    ms.set_seed(0)
    net = vit()
    optimizer = freeze_optimizer(O1, net, nn.Adam(net.trainable_params(), 1e-3))
    segment_of = optimizer.segment_of()
    expected = {0: 0, 1: 0, 2: 1, 3: 1, 4: 2, 5: 2}
    for stage, cell in enumerate(net):
        assert {segment_of[id(p)] for p in cell.trainable_params()} == {expected[stage]}, stage
    assert optimizer.groups_num == 3


def test_one_o1_step_trains():
    """One O1 step (configs/O1.json for a run of 10 updates, Adam) returns a finite loss and moves every weight."""
    ms.set_seed(0)
    net = vit(dim=32, heads=2)
    cell = build_train_network(nn.WithLossCell(net, nn.SoftmaxCrossEntropyWithLogits(sparse=True, reduction="mean")),
                               nn.Adam(net.trainable_params(), 1e-3), O1.replace("grad_freeze", total_steps=10))
    before = [p.asnumpy().copy() for p in net.trainable_params()]
    loss = cell(Tensor(images()), Tensor(np.array([0, 1, 2, 3], np.int32)))
    loss = loss[0] if isinstance(loss, tuple) else loss
    assert np.isfinite(float(loss.asnumpy()))
    moved = [not np.array_equal(b, p.asnumpy()) for b, p in zip(before, net.trainable_params())]
    assert all(moved), [p.name for p, m in zip(net.trainable_params(), moved) if not m]
