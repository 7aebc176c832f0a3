"""A Parameter of host-side state, written in place between steps.

The host's state (the ledger's figures, the policy's record, the decision log) lives in Parameters so that a
checkpoint holds it, but no graph reads or writes them. ``Parameter.set_data(Tensor(array))`` costs tens of
microseconds a call (a Tensor built and its dtype checked), which a weighing paid several times: on a launch-bound
run, a share of the step. MindSpore documents that ``Tensor.asnumpy()`` shares the tensor's storage, so a numpy view
of it, held, is written in place in about a microsecond, and a checkpoint saved after reads what was written.
"""
import numpy as np
from mindspore import Tensor

__all__ = ["HeldView"]


class HeldView:
    """Writes an array into one Parameter's storage through a held numpy view.

    The view is taken at the first write, and again where the Parameter no longer holds the storage it was taken of
    (``data_ptr`` differs: a checkpoint loaded with ``load_param_into_net``, or a ``set_data``, gives the Parameter
    new storage). Where the view does not share the Parameter's storage (a tensor held on a device, whose
    ``asnumpy`` is a copy), it writes with ``set_data`` instead.

    Args:
        parameter (Parameter): host-side state that no graph uses.
    """

    def __init__(self, parameter):
        self.parameter = parameter
        self._view = None  # the numpy view of the Parameter's storage, or None before the first write
        self._address = None  # the storage address the view was taken of

    def write(self, array):
        """Hold ``array`` (the Parameter's shape; cast to its dtype) in the Parameter."""
        if self._address is None or self.parameter.data_ptr() != self._address:
            view = self.parameter.asnumpy()
            shares = view.flags.writeable and view.ctypes.data == self.parameter.data_ptr()
            self._view, self._address = (view, view.ctypes.data) if shares else (None, None)
        if self._view is None:
            self.parameter.set_data(Tensor(np.asarray(array), self.parameter.dtype))
        else:
            self._view[...] = array
