"""Make a freshly built Cell use another Cell's state: every Parameter it holds is swapped for the owner's.

Gradient freezing builds one optimizer (and one train step) per trained suffix of the network. Those copies must
not own state of their own: the moments, step counters, loss scale and accumulation buffers are the owner's, so a
suffix step updates exactly the state a full step would, and no two distinct Parameters share a name (MindSpore
would then rename every parameter of the cell on its first call).
"""
from mindspore import Parameter, ParameterTuple

from ..shared_optimizer import unprefixed

__all__ = ["share_parameters", "positional_map"]


def _is_parameter_sequence(value):
    return isinstance(value, (list, tuple)) and value and all(isinstance(v, Parameter) for v in value)


def positional_map(copy, owner, attribute_names=None):
    """``{id(copy's Parameter): owner's Parameter}`` for per-weight state tuples, matched by weight.

    For every ParameterTuple attribute of ``copy`` with one entry per weight of ``copy.parameters`` (moments,
    per-weight learning rates) whose namesake on ``owner`` has one entry per weight of ``owner.parameters``, entry
    ``j`` maps to the owner's entry of the same weight. Names are not used, so per-group state whose names depend
    on the group's index (``learning_rate_group_0``) still maps to the right Parameter.
    """
    position = {id(p): i for i, p in enumerate(owner.parameters)}
    mine = [position[id(p)] for p in copy.parameters]
    mapping = {}
    for name, value in vars(copy).items():
        theirs = getattr(owner, name, None)
        if isinstance(value, ParameterTuple) and len(value) == len(mine) and isinstance(theirs, ParameterTuple) \
                and len(theirs) == len(position):
            for j, parameter in enumerate(value):
                mapping[id(parameter)] = theirs[mine[j]]
    return mapping


def share_parameters(cell, owner, mapping=None, who="share_parameters"):
    """Swap every Parameter held by ``cell`` and its sub-cells for ``owner``'s; returns ``cell``.

    A Parameter is swapped for ``mapping[id(p)]`` when given there, else for the owner's Parameter of the same
    name, compared without the ``share<n>.`` prefix (which only tells apart live train cells on one optimizer, see
    ``boost_cells.shared_optimizer``); Parameters that already are the owner's stay.

    Raises:
        TypeError: a Parameter of ``cell`` has no counterpart in ``owner`` (state the copy would own alone).
    """
    mapping = dict(mapping or {})
    owned = {id(p): p for _, p in owner.parameters_and_names()}
    by_name = {unprefixed(p.name): p for p in owned.values()}

    def swap(parameter):
        if id(parameter) in owned:
            return parameter
        if id(parameter) not in mapping:
            if unprefixed(parameter.name) not in by_name:
                raise TypeError(f"For '{who}', the state Parameter '{parameter.name}' of a {type(cell).__name__} "
                                f"has no counterpart in the {type(owner).__name__} whose state it must share; it keeps "
                                "state that cannot be split by parameter group.")
            mapping[id(parameter)] = by_name[unprefixed(parameter.name)]
        return mapping[id(parameter)]

    for _, sub in cell.cells_and_names():
        params = sub.__dict__["_params"]
        entries = list(params.items())
        params.clear()
        for key, parameter in entries:
            new = parameter if parameter is None else swap(parameter)
            params[new.name if new is not None and key == parameter.name else key] = new
        for name, value in list(vars(sub).items()):
            if _is_parameter_sequence(value):
                swapped = [swap(p) for p in value]
                kind = ParameterTuple if isinstance(value, ParameterTuple) else type(value)
                object.__setattr__(sub, name, kind(swapped))
    return cell
