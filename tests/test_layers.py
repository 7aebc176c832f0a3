"""The structure of the package: the import contracts in .importlinter hold (imports go one way, config -> parts
-> compositions -> entry points, nothing imports a command line, and only mindspore_internals imports MindSpore's
private modules); no module but mindspore_internals uses MindSpore's private modules, names or attributes
(tests/private_access_check.py), and the checker fails a broken sample; no module keeps mutable state at module
level. Run the contracts by hand with ``lint-imports`` from the repository root. And the structure of the tests: no
test module imports another (what several share lives in tests/helpers.py or tests/conftest.py), and the scan that
checks it fails a broken sample."""
import ast
import collections
import importlib
import pkgutil
import subprocess
import sys
import weakref

import pytest

import boost_cells
from tests.launch import ROOT
from tests.private_access_check import package_sources, problems, sample_source

LINT = "import sys; from importlinter.cli import lint_imports_command; sys.exit(lint_imports_command())"

MUTABLE = (dict, list, set, bytearray, collections.deque, weakref.WeakKeyDictionary, weakref.WeakValueDictionary,
           weakref.WeakSet)


@pytest.mark.slow  # a subprocess
def test_import_contracts_are_kept():
    """Runs import-linter's command line (what ``lint-imports`` runs) in a fresh interpreter from the repository
    root, so it analyses this checkout's boost_cells; no cache is written into the tree."""
    result = subprocess.run([sys.executable, "-c", LINT, "--config", str(ROOT / ".importlinter"), "--no-cache",
                             "--no-logo"], cwd=ROOT, capture_output=True, text=True, timeout=120, check=False)
    report = result.stdout + result.stderr
    assert result.returncode == 0, report
    assert "Contracts: 4 kept, 0 broken." in report, report


def test_mindspore_private_parts_are_used_in_mindspore_internals_only():
    """Outside boost_cells/mindspore_internals.py no module imports a private MindSpore module or name, nor uses a
    private attribute the package does not define itself, nor MindSpore's private state in a subclass of a
    MindSpore class (see tests/private_access_check.py)."""
    assert problems(package_sources(ROOT)) == []


BROKEN = """import importlib
import sys

import mindspore._c_expression
from mindspore import nn
from mindspore.communication._comm_helper import _ExistingGroup
from mindspore.graph.api import _pynative_executor

_FLAG = "_own_flag"
EXTENSION = importlib.import_module("mindspore._c_expression")


def children(cell):
    return cell._cells, getattr(cell, "_cell_init_args"), cell.__dict__.get("_params"), "_scope" in vars(cell)


def own_state(cell):
    object.__setattr__(cell, _FLAG, True)
    return cell._own_flag, cell.__dict__.get("_own_flag"), sys._getframe(0), _lookup()


def _lookup():
    return None


class Counter(nn.Cell):
    def __init__(self):
        super().__init__()
        self._count = 0
        self._auto_prefix = False

    def _get_name(self):
        return super()._get_name() + str(self._count)
"""


def test_the_private_access_checker_fails_a_broken_sample():
    """Each kind of private use is reported with its line; the package's own private state (set on self, by name,
    or defined at module level) and sys._getframe are not; mindspore_internals.py is not checked."""
    assert problems([sample_source("boost_cells/sample.py", BROKEN)]) == [
        "boost_cells/sample.py:4: imports MindSpore's private mindspore._c_expression",
        "boost_cells/sample.py:6: imports MindSpore's private mindspore.communication._comm_helper._ExistingGroup",
        "boost_cells/sample.py:7: imports MindSpore's private mindspore.graph.api._pynative_executor",
        "boost_cells/sample.py:10: imports MindSpore's private mindspore._c_expression",
        "boost_cells/sample.py:14: reads the private attribute '_cells', which boost_cells does not define "
        "(MindSpore's)",
        "boost_cells/sample.py:14: uses the private attribute '_cell_init_args' by name, which boost_cells does not "
        "define (MindSpore's)",
        "boost_cells/sample.py:14: uses the private attribute '_params' by name, which boost_cells does not define "
        "(MindSpore's)",
        "boost_cells/sample.py:14: uses the private attribute '_scope' by name, which boost_cells does not define "
        "(MindSpore's)",
        "boost_cells/sample.py:30: Counter uses '_auto_prefix', which a MindSpore class of its MRO defines",
        "boost_cells/sample.py:32: Counter defines '_get_name', which a MindSpore class of its MRO defines",
        "boost_cells/sample.py:33: Counter uses '_get_name', which a MindSpore class of its MRO defines"]
    assert problems([sample_source("boost_cells/mindspore_internals.py", BROKEN)]) == []


def test_no_module_level_mutable_state():
    """No registry, cache or table that one caller could change for every other: module-level constants are
    tuples, frozensets or read-only mappings. (``config_in_force.latest_config()`` is the one process-wide value;
    it is held as a plain reference, set only through ``set_latest_config``/``reset_latest_config``.)"""
    offenders = []
    for info in pkgutil.walk_packages(boost_cells.__path__, "boost_cells."):
        module = importlib.import_module(info.name)
        offenders += [f"{info.name}.{name}" for name, value in vars(module).items()
                      if not name.startswith("__") and isinstance(value, MUTABLE)]
    assert offenders == []


def imports_of_test_modules(path):
    """What a ``test_*.py`` module imports from another test module: ``(line, what)`` for each import that names a
    ``test_*`` module (``tests.test_freeze``, ``from tests import test_freeze``, ``from .test_freeze import x``,
    ``import test_freeze``) or a ``test_*`` name (pytest would collect it twice)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names
                      if any(part.startswith("test_") for part in alias.name.split("."))]
        elif isinstance(node, ast.ImportFrom):
            module = "." * node.level + (node.module or "")
            if any(part.startswith("test_") for part in (node.module or "").split(".")):
                found.append((node.lineno, module))
            found += [(node.lineno, f"{module}.{alias.name}".replace("..", ".")) for alias in node.names
                      if alias.name.startswith("test_")]
    return sorted(found)


def cross_imports(test_dir):
    """``path:line imports what`` for every import of a test module by a ``test_*.py`` module in ``test_dir``."""
    return [f"{path.name}:{line} imports {what}" for path in sorted(test_dir.glob("test_*.py"))
            for line, what in imports_of_test_modules(path)]


def test_no_test_module_imports_another():
    """A test module imports the package, tests/helpers.py (tiny networks, NumPy references; no pytest), the fixtures
    and Hypothesis strategies of tests/conftest.py, and the launchers; never another test module, whose tests would
    then depend on how it is edited (and whose imported ``test_*`` functions pytest would run twice)."""
    assert cross_imports(ROOT / "tests") == []


def test_the_cross_import_check_finds_every_form(tmp_path):
    """On a sample: each way to import a test module is reported once, a function's own import too; helpers,
    conftest, a name that merely contains ``test_`` and a module that is not a ``test_*.py`` are not."""
    (tmp_path / "test_good.py").write_text("import os\nfrom tests.helpers import batch\nfrom tests.conftest import "
                                          "examples\nfrom tests.launch import ROOT\nfrom tests import helpers\n"
                                          "from tests.helpers import latest_test_run\n", encoding="utf-8")
    (tmp_path / "test_broken.py").write_text(
        "import tests.test_good\n"
        "from tests.test_good import data\n"
        "from tests import figures, test_good\n"
        "from .test_good import state\n"
        "from . import test_good as good\n"
        "import test_good\n"
        "def later():\n"
        "    from tests.test_freeze import GROUP_STARTS\n", encoding="utf-8")
    (tmp_path / "helper_of_test_good.py").write_text("from tests.test_good import data\n", encoding="utf-8")
    assert cross_imports(tmp_path) == [
        "test_broken.py:1 imports tests.test_good", "test_broken.py:2 imports tests.test_good",
        "test_broken.py:3 imports tests.test_good", "test_broken.py:4 imports .test_good",
        "test_broken.py:5 imports .test_good", "test_broken.py:6 imports test_good",
        "test_broken.py:8 imports tests.test_freeze"]


def test_the_config_in_force_is_the_one_module_level_value_and_config_keeps_one_concern():
    """The process's config in force has a module of its own, the only one that rebinds a module-level name
    (``global``); config.py holds the config (schema, resolution, validation), not the warnings, the shipped names'
    lookup or the process-wide value it used to hold beside it."""
    rebinding = sorted(path.relative_to(ROOT).as_posix() for path in (ROOT / "boost_cells").rglob("*.py")
                       if any(isinstance(node, ast.Global) for node in ast.walk(ast.parse(path.read_text()))))
    assert rebinding == ["boost_cells/config_in_force.py"]
    defined = {node.name for node in ast.parse((ROOT / "boost_cells" / "config.py").read_text()).body
               if isinstance(node, (ast.FunctionDef, ast.ClassDef))}
    assert not defined & {"BoostConfigWarning", "warn_user", "latest_config", "set_latest_config",
                          "reset_latest_config", "_config_file", "_nearest_name"}
