"""The host state's Parameters are written in place (``HeldView``), and a checkpoint holds what was written last.

The ledger's figures, the policy's record and the decision log live in Parameters that no graph uses, written on the
host between steps. ``HeldView`` writes them through a numpy view of their storage (MindSpore documents that
``Tensor.asnumpy()`` shares it) instead of building a Tensor for ``set_data`` each time. These tests check what
that must keep: a checkpoint saved after a write holds it; a Parameter given new storage (a checkpoint loaded, a
``set_data``) is still written; and where ``asnumpy`` is a copy (a tensor held on a device) the write falls back to
``set_data``. That last case cannot occur on CPU, so a stand-in whose ``asnumpy`` returns a copy plays it."""
import mindspore as ms
import numpy as np
from mindspore import Parameter, Tensor, nn

from boost_cells.freezing.host.held_view import HeldView


class _Holder(nn.Cell):
    """A cell holding one Parameter of host state (float32, (2, 3)), as the ledger holds its arrays."""

    def __init__(self, value=0.0):
        super().__init__()
        self.state = Parameter(Tensor(np.full((2, 3), value, np.float32)), name="state", requires_grad=False)


def test_a_write_lands_in_place_and_in_a_checkpoint(tmp_path):
    """On CPU the view shares the Parameter's storage (the fast path is taken: no ``set_data``), the Parameter reads
    what was written, and so does a checkpoint saved after it."""
    holder = _Holder()
    view = HeldView(holder.state)
    written = np.arange(6, dtype=np.float32).reshape(2, 3)
    view.write(written)
    address = holder.state.data_ptr()
    view.write(written * 2)
    assert holder.state.data_ptr() == address  # written in place: the Parameter keeps its storage
    np.testing.assert_array_equal(holder.state.asnumpy(), written * 2)
    path = str(tmp_path / "held.ckpt")
    ms.save_checkpoint(holder, path)
    np.testing.assert_array_equal(ms.load_checkpoint(path)["state"].asnumpy(), written * 2)


def test_a_parameter_given_new_storage_is_still_written(tmp_path):
    """A checkpoint loaded into the Parameter (``load_param_into_net``) or a ``set_data`` gives it new storage; the
    next write lands there, not in the storage the first view was taken of."""
    holder, saved = _Holder(), _Holder(7.0)
    path = str(tmp_path / "saved.ckpt")
    ms.save_checkpoint(saved, path)
    view = HeldView(holder.state)
    view.write(np.ones((2, 3), np.float32))
    ms.load_param_into_net(holder, ms.load_checkpoint(path))
    np.testing.assert_array_equal(holder.state.asnumpy(), np.full((2, 3), 7.0))
    view.write(np.full((2, 3), 3.0, np.float32))
    np.testing.assert_array_equal(holder.state.asnumpy(), np.full((2, 3), 3.0))
    holder.state.set_data(Tensor(np.zeros((2, 3), np.float32)))
    view.write(np.full((2, 3), 4.0, np.float32))
    np.testing.assert_array_equal(holder.state.asnumpy(), np.full((2, 3), 4.0))


class _DeviceHeld:
    """Stands in for a Parameter whose tensor is held on a device (GPU, Ascend): ``asnumpy`` returns a copy, at an
    address other than the tensor's, so a write into it would be lost; only ``set_data`` changes the value."""

    def __init__(self, value):
        self.value, self.dtype, self.set_data_calls = np.array(value, np.float32), ms.float32, 0

    def asnumpy(self):
        return self.value.copy()

    def data_ptr(self):
        return self.value.ctypes.data

    def set_data(self, tensor):
        self.set_data_calls += 1
        self.value = tensor.asnumpy().copy()


def test_where_the_view_is_a_copy_the_write_falls_back_to_set_data():
    """A view that does not share the storage is never written into: every write goes through ``set_data``."""
    held = _DeviceHeld([0.0, 0.0])
    view = HeldView(held)
    view.write(np.array([1.0, 2.0], np.float32))
    view.write(np.array([3.0, 4.0], np.float32))
    assert held.set_data_calls == 2
    np.testing.assert_array_equal(held.asnumpy(), [3.0, 4.0])
