"""The configs shipped with boost_cells: where ``boost_cells.shipped`` finds them (the checkout's
``configs/`` here, the package's own ``configs/`` when installed, an error naming both when neither is there),
``python -m boost_cells configs`` (the list, ``--copy`` and its refusals, exit status 2 as ``explain``'s), and a wheel
built from this checkout, installed into a fresh virtual environment, that finds them by name from a directory outside
the repository.

The command runs in this process through ``boost_cells.__main__.main``; only the wheel's test starts subprocesses."""
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from boost_cells import shipped
from boost_cells.__main__ import main
from boost_cells.explain import summary
from boost_cells.shipped import shipped_configs, shipped_dir
from tests.launch import ROOT

CONFIGS = ROOT / "configs"
NAMES = sorted(path.stem for path in CONFIGS.glob("*.json"))


def test_the_checkout_ships_its_configs_directory():
    assert shipped_dir() == CONFIGS
    assert shipped_configs() == {name: CONFIGS / f"{name}.json" for name in NAMES}
    assert {"O0", "O1", "O2"} <= set(NAMES)


def test_an_installed_package_reads_its_own_configs(tmp_path, monkeypatch, capsys):
    """The package's ``configs/`` (a wheel's) wins, even beside a setup.py; with neither it and a checkout's, the error
    names both places, and the ``configs`` command exits 2 with it."""
    package = tmp_path / "site-packages" / "boost_cells"
    (package / "configs").mkdir(parents=True)
    (package / "configs" / "O1.json").write_text("{}")
    (package.parent / "setup.py").write_text("")
    (package.parent / "configs").mkdir()
    monkeypatch.setattr(shipped, "_PACKAGE", package)
    assert shipped_configs() == {"O1": package / "configs" / "O1.json"}
    shutil.rmtree(package / "configs")
    assert shipped_dir() == package.parent / "configs"  # a source checkout: setup.py beside the package
    (package.parent / "setup.py").unlink()
    with pytest.raises(FileNotFoundError, match=f"neither '{package / 'configs'}' .* nor "
                                                f"'{package.parent / 'configs'}' beside a setup.py .* Reinstall"):
        shipped_dir()
    assert main(["configs"]) == 2
    assert capsys.readouterr().err.startswith("python -m boost_cells configs: error: boost_cells' shipped configs are "
                                              "missing: neither ")


def test_configs_lists_each_name_with_its_summary(capsys):
    assert main(["configs"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == (f"configs shipped with boost_cells ({CONFIGS}); a name stands for its file wherever a config "
                        "path is accepted:")
    width = max(map(len, NAMES))
    assert lines[1:] == [f"  {name:<{width}}  {summary(CONFIGS / f'{name}.json')}" for name in NAMES]
    assert lines[2].startswith("  O1                 boost level O1: grad_freeze on; automatic freezing of 3 groups")


def test_configs_copy_refuses_to_overwrite_without_force(tmp_path, capsys):
    """--copy makes the directory and copies every file; a file in the way stops the copy before anything is
    written, unless --force; a directory that is a file is an error too. Errors exit 2 with a message on stderr."""
    target = tmp_path / "mine" / "configs"
    assert main(["configs", "--copy", str(target)]) == 0
    assert capsys.readouterr().out.splitlines() == [str(target / f"{name}.json") for name in NAMES]
    for name in NAMES:
        assert (target / f"{name}.json").read_bytes() == (CONFIGS / f"{name}.json").read_bytes()

    partial = tmp_path / "partial"
    partial.mkdir()
    (partial / "O1.json").write_text("mine")
    assert main(["configs", "--copy", str(partial)]) == 2
    assert capsys.readouterr().err == (f"python -m boost_cells configs: error: --copy {partial}: it would overwrite "
                                       f"{partial / 'O1.json'}; nothing was copied. Pass --force to overwrite them, "
                                       "or copy into another directory.\n")
    assert [path.name for path in partial.iterdir()] == ["O1.json"]
    assert (partial / "O1.json").read_text() == "mine"
    assert main(["configs", "--copy", str(partial), "--force"]) == 0
    assert (partial / "O1.json").read_bytes() == (CONFIGS / "O1.json").read_bytes()
    assert len(list(partial.iterdir())) == len(NAMES)

    assert main(["configs", "--copy", str(partial / "O1.json")]) == 2
    assert "error: --copy " + str(partial / "O1.json") + ": not a directory" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_info:
        main(["configs", "--force"])
    assert exit_info.value.code == 2
    assert "--force goes with --copy DIR" in capsys.readouterr().err


def _run(*args, **kwargs):
    """Run a command; fail the test with its output when it fails."""
    result = subprocess.run([str(arg) for arg in args], capture_output=True, text=True, timeout=120, check=False,
                            **kwargs)
    assert result.returncode == 0, f"{args}:\n{result.stdout}\n{result.stderr}"
    return result


# Resolve "O1" in the installed package; print where the package and its configs are.
SNIPPET = """
import sys
import boost_cells
from boost_cells import BoostConfig
from boost_cells.shipped import shipped_configs
assert BoostConfig.coerce("O1") == BoostConfig.from_file(sys.argv[1])
print(boost_cells.__file__)
print(shipped_configs()["O1"])
"""


@pytest.mark.slow  # builds and installs a wheel, then runs three interpreters that import MindSpore (about 10 s)
def test_an_installed_wheel_finds_its_configs_by_name(tmp_path):
    """The issue's report: installed with pip, boost_cells could not find configs/O1.json from another directory.
    A wheel built from this checkout (from a copy of what setup.py reads, so no build/ or egg-info lands in the
    checkout) is installed, not editable, into a fresh virtual environment, which sees this interpreter's
    site-packages (MindSpore and the rest) through a .pth file: a plain path line, so the editable install's
    ``__editable__`` finder there is not run and cannot make a checkout's source visible. From a directory outside the
    repository, ``explain O1``, ``configs`` and ``BoostConfig.coerce("O1")`` all read the installed package's file."""
    source = tmp_path / "source"
    source.mkdir()
    shutil.copy(ROOT / "setup.py", source)
    for directory in ("boost_cells", "configs"):
        shutil.copytree(ROOT / directory, source / directory, ignore=shutil.ignore_patterns("__pycache__"))
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    _run(sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index", "-q",
         "-w", tmp_path / "dist", source, env=env)
    (wheel,) = (tmp_path / "dist").glob("boost_cells-*.whl")
    venv = tmp_path / "venv"
    _run(sys.executable, "-m", "venv", "--without-pip", venv)
    python = venv / ("Scripts" if os.name == "nt" else "bin") / "python"
    _run(sys.executable, "-m", "pip", "--python", python, "install", "--no-deps", "--no-index", "-q", wheel, env=env)
    site = Path(_run(python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))", env=env).stdout.strip())
    host = dict.fromkeys(sysconfig.get_path(kind) for kind in ("purelib", "platlib"))
    (site / "host_site_packages.pth").write_text("".join(f"{path}\n" for path in host))
    outside = tmp_path / "project"
    outside.mkdir()

    explained = _run(python, "-m", "boost_cells", "explain", "O1", cwd=outside, env=env).stdout
    assert explained.startswith("O1:\n  level O1; features (boost.mode \"manual\"") and "on: grad_freeze;" in explained
    listed = _run(python, "-m", "boost_cells", "configs", cwd=outside, env=env).stdout.splitlines()
    assert listed[0].startswith(f"configs shipped with boost_cells ({site / 'boost_cells' / 'configs'});")
    assert [line.split()[0] for line in listed[1:]] == NAMES
    package, o1 = _run(python, "-c", SNIPPET, CONFIGS / "O1.json", cwd=outside, env=env).stdout.splitlines()
    assert Path(package) == site / "boost_cells" / "__init__.py"
    assert Path(o1) == site / "boost_cells" / "configs" / "O1.json"
    assert Path(o1).read_bytes() == (CONFIGS / "O1.json").read_bytes()
