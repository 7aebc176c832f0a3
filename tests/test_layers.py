"""The structure of the package: the import contracts in .importlinter hold (imports go one way, config -> parts
-> compositions -> entry points, and nothing imports a command line), and no module keeps mutable state at module
level. Run the contracts by hand with ``lint-imports`` from the repository root."""
import collections
import importlib
import pkgutil
import subprocess
import sys
import weakref

import boost_cells
from tests.launch import ROOT

LINT = "import sys; from importlinter.cli import lint_imports_command; sys.exit(lint_imports_command())"

MUTABLE = (dict, list, set, bytearray, collections.deque, weakref.WeakKeyDictionary, weakref.WeakValueDictionary,
           weakref.WeakSet)


def test_import_contracts_are_kept():
    """Runs import-linter's command line (what ``lint-imports`` runs) in a fresh interpreter from the repository
    root, so it analyses this checkout's boost_cells; no cache is written into the tree."""
    result = subprocess.run([sys.executable, "-c", LINT, "--config", str(ROOT / ".importlinter"), "--no-cache",
                             "--no-logo"], cwd=ROOT, capture_output=True, text=True, timeout=120, check=False)
    report = result.stdout + result.stderr
    assert result.returncode == 0, report
    assert "Contracts: 2 kept, 0 broken." in report, report


def test_no_module_level_mutable_state():
    """No registry, cache or table that one caller could change for every other: module-level constants are
    tuples, frozensets or read-only mappings. (``config.latest_config()`` is the one process-wide value; it is
    held as a plain reference, set only through ``set_latest_config``/``reset_latest_config``.)"""
    offenders = []
    for info in pkgutil.walk_packages(boost_cells.__path__, "boost_cells."):
        module = importlib.import_module(info.name)
        offenders += [f"{info.name}.{name}" for name, value in vars(module).items()
                      if not name.startswith("__") and isinstance(value, MUTABLE)]
    assert offenders == []
