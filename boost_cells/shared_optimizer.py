"""Several train cells on one optimizer (tflib's ``share=``): one optimizer state, distinct names for the rest.

StyleGAN2's lazy regularization trains the generator with its main loss every step and a regularization loss
every N steps, both through one Adam. Built on the same optimizer object, two train cells already share its
moments, step counters and learning rate: they are the same Parameters, so there is nothing to duplicate or
keep in sync. What would clash is each cell's own state (``scale_sense``, ``loss_scale.*``,
``grad_accumulation.*``): same names on different Parameters, so a parent cell holding both would make MindSpore
rename every parameter in it (the user's weights included) and a joint checkpoint could not tell them apart.

So the first train cell built on an optimizer keeps the plain names (checkpoints of single-cell runs load
unchanged) and every further one prefixes its own state with ``share<n>.``, n = 1, 2, ... in order of
construction. The network's and the optimizer's Parameters are never renamed.

The names depend only on the order of construction, never on which cells are still alive: the count is kept on
the optimizer object itself (``optimizer._boost_cells_train_cells``), not in a process-wide registry, so a run that
builds the same cells in the same order gets the same names, and loads its own checkpoint, whatever the garbage
collector freed in between. A cell rebuilt on the same optimizer object is a further cell (``share<n>.``); to load
a single-cell checkpoint under the plain names into a rebuilt cell, rebuild the optimizer too, as a resumed run
does.
"""
__all__ = ["own_state", "prefix_own_state", "share_prefix", "train_cells_built_on"]

# The count of train cells built on an optimizer, kept on the optimizer (a plain int attribute, not state).
_COUNT = "_boost_cells_train_cells"


def train_cells_built_on(optimizer):
    """How many train cells took a prefix from ``share_prefix`` on ``optimizer`` so far."""
    return getattr(optimizer, _COUNT, 0)


def share_prefix(optimizer):
    """The prefix for the own state of a train cell being built on ``optimizer``: "" for the first one, "share<n>."
    for the n-th further one, counted in order of construction on the optimizer object (see the module docstring):
    only the count decides, whether earlier cells are alive or not.
    """
    index = train_cells_built_on(optimizer)
    object.__setattr__(optimizer, _COUNT, index + 1)
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
