"""Several train cells on one optimizer (tflib's ``share=``): one optimizer state, distinct names for the rest.

StyleGAN2's lazy regularization trains the generator with its main loss every step and a regularization loss
every N steps, both through one Adam. Built on the same optimizer object, two train cells already share its
moments, step counters and learning rate: they are the same Parameters, so there is nothing to duplicate or
keep in sync. What would clash is each cell's own state (``scale_sense``, ``loss_scale.*``,
``grad_accumulation.*``): same names on different Parameters, so a parent cell holding both would make MindSpore
rename every parameter in it (the user's weights included) and a joint checkpoint could not tell them apart.

So the first live train cell on an optimizer keeps the plain names (checkpoints of single-cell runs load
unchanged) and every further one prefixes its own state with ``share<n>.``, n = 1, 2, ... in order of
construction. The network's and the optimizer's Parameters are never renamed. A cell rebuilt on the same optimizer
while an earlier one is still referenced counts as a further cell, so drop the earlier one first when the new one
must load a checkpoint under the plain names.
"""
import re
import weakref

__all__ = ["own_state", "prefix_own_state", "share_prefix", "unprefixed"]

_PREFIX = re.compile(r"^share[1-9][0-9]*\.")

_CELLS_ON = weakref.WeakKeyDictionary()  # optimizer -> {share index: train cell}, both held weakly


def share_prefix(optimizer, cell):
    """The prefix for ``cell``'s own state: "" for the first live train cell on ``optimizer``, else "share<n>."."""
    cells = _CELLS_ON.setdefault(optimizer, weakref.WeakValueDictionary())
    index = next(i for i in range(len(cells) + 1) if i not in cells)
    cells[index] = cell
    return f"share{index}." if index else ""


def own_state(cell, *owners):
    """The Parameters of ``cell`` that none of ``owners`` (the network, the optimizer) holds."""
    shared = {id(param) for owner in owners for param in owner.get_parameters()}
    return [param for param in cell.get_parameters() if id(param) not in shared]


def prefix_own_state(cell, prefix, *owners):
    """Prefix the names of ``cell``'s own state with ``prefix`` (once: names that carry it already are kept)."""
    for param in own_state(cell, *owners):
        if not param.name.startswith(prefix):
            param.name = prefix + param.name


def unprefixed(name):
    """``name`` without a ``share<n>.`` prefix: the name the state has in the first cell on its optimizer."""
    return _PREFIX.sub("", name, count=1)
