"""Every module path of ``mindspore.boost`` is one of boost_cells (issue 22): ``from boost_cells.X import Y`` works for
every module X of the installed reference and every name Y of its ``__all__``, with a compatible signature.

Compatible: a class's ``__init__`` or a function takes the reference's parameters first, in order, with the same
names, kinds and defaults; any further parameter has a default, so every call written for the reference means the
same here. The accumulation ops register the reference's argument types.
"""
import importlib
import inspect
import pkgutil
import subprocess
import sys

import mindspore.boost as reference
import pytest
from mindspore import ops

import boost_cells
from boost_cells.reference_paths import REFERENCE_MODULES
from tests.launch import ROOT

REFERENCE_PATHS = sorted(info.name.rsplit(".", 1)[1]
                         for info in pkgutil.walk_packages(reference.__path__, reference.__name__ + "."))


def parameters(obj):
    """The parameters a caller passes: a class's ``__init__``'s without ``self``, a function's."""
    listed = list(inspect.signature(obj.__init__ if inspect.isclass(obj) else obj).parameters.values())
    return listed[1:] if inspect.isclass(obj) else listed


def registered_types(op):
    """A ``MultitypeFuncGraph``'s registered argument types, by name (``[("Int64", "Tensor", "Tensor")]``)."""
    return [tuple(str(dtype) for dtype in signature) for signature, _ in op.entries]


def check_compatible(ours, theirs, name):
    if isinstance(theirs, ops.MultitypeFuncGraph):
        assert isinstance(ours, ops.MultitypeFuncGraph), name
        assert registered_types(ours) == registered_types(theirs), name
        return
    assert inspect.isclass(ours) == inspect.isclass(theirs), name
    expected, got = parameters(theirs), parameters(ours)
    assert [(p.name, p.kind, p.default) for p in got[:len(expected)]] == \
        [(p.name, p.kind, p.default) for p in expected], name
    extra = [p.name for p in got[len(expected):]
             if p.default is inspect.Parameter.empty and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    assert extra == [], f"{name}: parameters beyond the reference's without a default: {extra}"


def test_the_table_lists_every_module_of_the_reference():
    assert REFERENCE_PATHS == sorted(name for name, _ in REFERENCE_MODULES)
    assert len(REFERENCE_PATHS) == 9


@pytest.mark.parametrize("path", REFERENCE_PATHS)
def test_module_path_holds_the_references_names(path):
    theirs = importlib.import_module(f"{reference.__name__}.{path}")
    ours = importlib.import_module(f"boost_cells.{path}")
    assert ours is getattr(boost_cells, path)
    assert ours.__all__ == theirs.__all__
    for name in theirs.__all__:
        namespace = {}
        exec(f"from boost_cells.{path} import {name}", namespace)  # pylint: disable=exec-used
        assert namespace[name] is getattr(boost_cells, name)
        check_compatible(namespace[name], getattr(theirs, name), f"boost_cells.{path}.{name}")


def test_no_module_of_the_package_hides_behind_an_alias():
    """A real module or subpackage named as a reference path would be shadowed by the alias."""
    real = {info.name for info in pkgutil.iter_modules(boost_cells.__path__)}
    assert real.isdisjoint(REFERENCE_PATHS)


def test_paths_import_first_in_a_fresh_interpreter():
    """As client code imports them: the path before the package, in a new process."""
    code = ("from boost_cells.grad_accumulation import gradient_accumulation_op, gradient_clear_op\n"
            "import boost_cells.boost_cell_wrapper as wrapper\n"
            "from boost_cells.grad_freeze import freeze_cell\n"
            "print(wrapper.BoostTrainOneStepCell.__module__, freeze_cell.__name__)")
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120,
                            check=False)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["boost_cells.train_cells", "freeze_cell"]
