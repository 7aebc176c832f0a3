"""Make a suffix copy of an optimizer use the state of the optimizer it was copied from.

Gradient freezing builds one optimizer per trained suffix of the network (``FreezeOpt.opts``): the same class and
arguments over fewer weights. Those copies must not own state of their own: the moments, step counters and
learning rates are the original's, so a suffix step updates exactly the state a full step would, and a checkpoint
holds one set of optimizer state under the usual names.

The copy is re-pointed through the Cell attribute protocol only (``setattr``/``delattr``, the way the copy's own
``__init__`` set its state), matched by attribute name, never by Parameter name: the original's state may have been
renamed (``pair0.global_step`` in the GAN cell) without breaking the match.

A plain list or tuple of Parameters assigned to a Cell (the optimizer's ``group_lr`` once its constructor reorders its
groups by ``order_params``) is not held in the Cell's parameter table: ``Cell.__setattr__`` only records the objects and
names in the Cell's undocumented ``exist_objs``/``exist_names`` registry, to refuse a second Parameter of the same name.
When such a list is swapped for the owner's, the copy's own Parameters leave the Cell, so their entries leave the
registry first (``mindspore_internals.forget_listed_parameter``); otherwise the owner's Parameter of the same name would
be refused.
"""
from mindspore import Parameter, ParameterTuple

from ...mindspore_internals import forget_listed_parameter

__all__ = ["share_state"]


def _is_parameter_sequence(value):
    return isinstance(value, (list, tuple)) and value and all(isinstance(v, Parameter) for v in value)


def _counterparts(name, mine, theirs, copy, owner, who):
    """The owner's entries for the copy's Parameter sequence ``name``: by weight when both hold one entry per weight
    of their optimizer (moments, per-weight learning rates), else entry by entry when the lengths agree."""
    copy_weights = getattr(copy, "parameters", None)
    owner_weights = getattr(owner, "parameters", None)
    if copy_weights is not None and owner_weights is not None and len(mine) == len(copy_weights) \
            and len(theirs) == len(owner_weights):
        position = {id(w): i for i, w in enumerate(owner_weights)}
        return [theirs[position[id(w)]] for w in copy_weights]
    if len(mine) == len(theirs):
        return list(theirs)
    raise TypeError(f"For '{who}', the optimizer state '{name}' of a {type(copy).__name__} has {len(mine)} entries "
                    f"and the original's has {len(theirs)}; this state cannot be split by parameter group.")


def share_state(copy, owner, who="share_state"):
    """Swap every Parameter that ``copy`` and its sub-cells hold for ``owner``'s, attribute by attribute; returns
    ``copy``. Parameters that already are the owner's (the weights) stay.

    Raises:
        TypeError: a state Parameter of ``copy`` has no counterpart in ``owner`` (state the copy would own alone).
    """
    owned = {id(p) for p in owner.get_parameters()}
    owner_cells = dict(owner.cells_and_names())
    for path, sub in copy.cells_and_names():
        theirs = owner_cells.get(path)
        if theirs is None:
            raise TypeError(f"For '{who}', the {type(copy).__name__} copy has a sub-cell '{path}' that the original "
                            "does not have.")
        replaced = set()
        for name, value in list(vars(sub).items()):
            if not _is_parameter_sequence(value) or all(id(p) in owned for p in value):
                continue
            counterparts = _counterparts(name, value, getattr(theirs, name, ()), sub, theirs, who)
            for parameter in value:
                if id(parameter) not in owned and id(parameter) not in replaced:
                    replaced.add(id(parameter))
                    if isinstance(value, ParameterTuple):
                        delattr(sub, parameter.name)
                    else:
                        forget_listed_parameter(sub, parameter)
            kind = ParameterTuple if isinstance(value, ParameterTuple) else type(value)
            setattr(sub, name, kind(counterparts))
        for key, parameter in list(sub.parameters_and_names(expand=False)):
            if id(parameter) in owned:
                continue
            counterpart = getattr(theirs, key, None)
            if not isinstance(counterpart, Parameter):
                raise TypeError(f"For '{who}', the state Parameter '{parameter.name}' of a {type(copy).__name__} has "
                                f"no counterpart in the {type(owner).__name__} whose state it must share.")
            setattr(sub, key, counterpart)
    return copy
