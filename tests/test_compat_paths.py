"""Every module path of ``mindspore.boost`` is one of boost_cells: ``from boost_cells.X import Y`` works for
every module X of the installed reference and every name Y of its ``__all__``, with a compatible signature. Each path
is a real file of the package that only re-exports the package's names, and the package registers no
module of its own in ``sys.modules``.

Compatible: a class's ``__init__`` or a function takes the reference's parameters first, in order, with the same
names, kinds and defaults; any further parameter has a default, so every call written for the reference means the
same here. The accumulation ops register the reference's argument types.
"""
import importlib
import inspect
import pkgutil
import re
import subprocess
import sys
from pathlib import Path

import mindspore.boost as reference
import pytest
from mindspore import ops

import boost_cells
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


def test_every_module_of_the_reference_is_a_file_of_the_package():
    """Tools that read the tree instead of importing it (``pkgutil``, an editor's index, a type checker) list them."""
    files = {info.name: info.ispkg for info in pkgutil.iter_modules(boost_cells.__path__)}
    assert len(REFERENCE_PATHS) == 9
    assert {path: files.get(path) for path in REFERENCE_PATHS} == dict.fromkeys(REFERENCE_PATHS, False)


@pytest.mark.parametrize("path", REFERENCE_PATHS)
def test_module_path_holds_the_references_names(path):
    theirs = importlib.import_module(f"{reference.__name__}.{path}")
    ours = importlib.import_module(f"boost_cells.{path}")
    assert ours is getattr(boost_cells, path)
    assert Path(ours.__file__) == Path(boost_cells.__file__).parent / f"{path}.py"
    assert ours.__all__ == theirs.__all__
    # A re-export only: no name of its own, no second home for a name.
    assert sorted(name for name in vars(ours) if not name.startswith("_")) == sorted(theirs.__all__)
    for name in theirs.__all__:
        namespace = {}
        exec(f"from boost_cells.{path} import {name}", namespace)  # pylint: disable=exec-used
        assert namespace[name] is getattr(boost_cells, name)
        check_compatible(namespace[name], getattr(theirs, name), f"boost_cells.{path}.{name}")


@pytest.mark.parametrize("path", REFERENCE_PATHS)
def test_module_path_says_where_its_names_live(path):
    """The docstring names the reference's module and, for every name, the part of boost_cells that defines it."""
    ours = importlib.import_module(f"boost_cells.{path}")
    assert f"``mindspore.boost.{path}``" in ours.__doc__
    named = re.findall(r"``(boost_cells\.[\w.]+)``", ours.__doc__)
    for name in ours.__all__:
        home = getattr(getattr(ours, name), "__module__", "")
        if home.startswith("boost_cells."):  # the accumulation ops are MultitypeFuncGraph instances: no home of theirs
            assert any(home == part or home.startswith(part + ".") for part in named), (name, home, named)


@pytest.mark.slow  # a subprocess
def test_the_package_registers_no_module():
    """After ``import boost_cells`` in a new process, every ``boost_cells`` entry of ``sys.modules`` is the module of
    its own file (no alias written by the package), and the nine paths are attributes of the package, as
    ``import mindspore.boost`` makes its modules."""
    code = ("import os, sys\n"
            "import boost_cells\n"
            "root = os.path.dirname(os.path.dirname(os.path.abspath(boost_cells.__file__)))\n"
            "for name, module in sorted(sys.modules.items()):\n"
            "    if name == 'boost_cells' or name.startswith('boost_cells.'):\n"
            "        path = os.path.join(root, *name.split('.'))\n"
            "        expected = (os.path.join(path, '__init__.py') if hasattr(module, '__path__') else path + '.py')\n"
            "        print(name, os.path.abspath(getattr(module, '__file__', None) or '') == expected)\n"
            "print('paths', boost_cells.grad_freeze.FreezeOpt is boost_cells.FreezeOpt, boost_cells.dim_reduce.__name__)\n")
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120,
                            check=False)
    assert result.returncode == 0, result.stderr
    lines = [line.split() for line in result.stdout.splitlines()]
    entries = {words[0]: words[1] for words in lines[:-1]}
    assert [name for name, real in entries.items() if real != "True"] == []
    assert {f"boost_cells.{path}" for path in REFERENCE_PATHS} <= entries.keys()
    assert lines[-1] == ["paths", "True", "boost_cells.dim_reduce"]


@pytest.mark.slow  # a subprocess
def test_paths_import_first_in_a_fresh_interpreter():
    """As client code imports them: the path before the package, in a new process."""
    code = ("from boost_cells.grad_accumulation import gradient_accumulation_op, gradient_clear_op\n"
            "import boost_cells.boost_cell_wrapper as wrapper\n"
            "from boost_cells.grad_freeze import FreezeOpt, freeze_cell\n"
            "print(wrapper.BoostTrainOneStepCell.__module__, freeze_cell.__name__, FreezeOpt.__name__)")
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120,
                            check=False)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["boost_cells.train_cells", "freeze_cell", "FreezeOpt"]
