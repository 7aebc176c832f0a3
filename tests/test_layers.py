"""The import contracts in .importlinter hold: imports go one way, config -> parts -> compositions -> entry points,
and nothing imports a command line. Run by hand with ``lint-imports`` from the repository root."""
import subprocess
import sys

from tests.launch import ROOT

LINT = "import sys; from importlinter.cli import lint_imports_command; sys.exit(lint_imports_command())"


def test_import_contracts_are_kept():
    """Runs import-linter's command line (what ``lint-imports`` runs) in a fresh interpreter from the repository
    root, so it analyses this checkout's boost_cells; no cache is written into the tree."""
    result = subprocess.run([sys.executable, "-c", LINT, "--config", str(ROOT / ".importlinter"), "--no-cache",
                             "--no-logo"], cwd=ROOT, capture_output=True, text=True, timeout=120, check=False)
    report = result.stdout + result.stderr
    assert result.returncode == 0, report
    assert "Contracts: 2 kept, 0 broken." in report, report
