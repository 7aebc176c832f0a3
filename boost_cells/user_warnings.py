"""Warnings to the user: ``BoostConfigWarning`` and ``warn_user``, which attributes a warning to the user's line.

Every warning of boost_cells about a config, a train cell or a ``Model`` is a ``BoostConfigWarning`` given through
``warn_user``, so it points at the line that built the thing warned about, not at a line inside boost_cells or
MindSpore.
"""
import os
import sys
import warnings

__all__ = ["BoostConfigWarning", "warn_user"]


class BoostConfigWarning(UserWarning):
    """A config that is valid and means what the reference makes it mean, but is likely a mistake, or that cannot
    apply in full to the network or the call it is used with (the message names what was left out)."""


def warn_user(message, category=BoostConfigWarning):
    """Warn, attributed to the first caller outside boost_cells and MindSpore: the user's line (that built the
    config, the train cell or the ``Model``; ``mindspore.train.Model.__init__`` calls back into boost_cells)."""
    import mindspore  # pylint: disable=import-outside-toplevel
    skipped = tuple(os.path.dirname(os.path.abspath(module.__file__)) + os.sep
                    for module in (sys.modules[__package__], mindspore))
    frame, level = sys._getframe(0), 1  # pylint: disable=protected-access
    while frame is not None and os.path.abspath(frame.f_code.co_filename).startswith(skipped):
        frame, level = frame.f_back, level + 1
    warnings.warn(message, category, stacklevel=level)
