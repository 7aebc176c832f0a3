"""The config files shipped with boost_cells, by name: the levels O0, O1 and O2 as tuned here, and one example per
feature.

The repository holds one copy of them, its top-level ``configs/``. ``setup.py`` ships that directory inside the
package as ``boost_cells/configs/`` (``package_dir`` maps the one onto the other, ``package_data`` takes its JSON
files), so an installed boost_cells carries its own. ``shipped_dir()`` is where the files are for the package being
run: the package's own ``configs/`` when it was installed from a wheel; in a source checkout (an editable install,
or the checkout on ``sys.path``), whose package directory has none, the checkout's ``configs/`` beside ``setup.py``,
so the files read are the ones the checkout edits. ``shipped_configs()`` maps each file's name, its stem ("O1"), to
its path.

``BoostConfig`` resolves a name given where a config path is accepted (``BoostConfig.from_file("O1")``,
``boost_config="O1"``, ``Model(..., boost_config_dict="O1")``) through ``config_file``, and
``python -m boost_cells configs`` lists and copies the files.
"""
import difflib
import os
from pathlib import Path

__all__ = ["config_file", "shipped_configs", "shipped_dir"]

_PACKAGE = Path(__file__).resolve().parent


def shipped_dir():
    """The directory of the shipped config files: ``boost_cells/configs/`` in an installed package, else (a source
    checkout) the ``configs/`` beside ``setup.py``.

    Raises:
        FileNotFoundError: neither exists (a broken install), naming both places.
    """
    installed = _PACKAGE / "configs"
    if installed.is_dir():
        return installed
    checkout = _PACKAGE.parent
    if (checkout / "setup.py").is_file() and (checkout / "configs").is_dir():
        return checkout / "configs"
    raise FileNotFoundError(f"boost_cells' shipped configs are missing: neither '{installed}' (an installed package) "
                            f"nor '{checkout / 'configs'}' beside a setup.py (a source checkout) exists. Reinstall "
                            "boost_cells.")


def shipped_configs():
    """Each shipped config file by name: ``{"O0": Path(".../O0.json"), "O1": ..., "adasum": ..., ...}``, sorted by
    name. The name is the file's stem.

    Raises:
        FileNotFoundError: as ``shipped_dir``.
    """
    return dict(sorted((path.stem, path) for path in shipped_dir().glob("*.json")))


def config_file(path, arg):
    """The file that ``path`` (the argument named ``arg``) stands for: ``path`` itself when it is an existing file (a
    path wins over a name), else, for a str, the shipped config of that name (``shipped_configs``); a path object is
    always a path."""
    if os.path.isfile(path):
        return os.fspath(path)
    shipped = shipped_configs()
    if isinstance(path, str) and path in shipped:
        return str(shipped[path])
    names = f"{', '.join(shipped)} (python -m boost_cells configs lists them).{_nearest_name(path, shipped)}"
    if not isinstance(path, str):
        raise FileNotFoundError(f"For 'BoostConfig', '{arg}': config file '{os.fspath(path)}' does not exist. A path "
                                f"object is always a path; a shipped config is named by a str: {names}")
    raise FileNotFoundError(f"For 'BoostConfig', '{arg}': config file {path!r} does not exist, and it is not the name "
                            "of a config shipped with boost_cells. Give a path to a JSON config file or one of the "
                            f"shipped names: {names}")


def _nearest_name(path, shipped):
    """The hint " Did you mean the shipped config 'O1'?" for the shipped name nearest the stem of ``path`` ("o1",
    "configs/O1.json"), case aside; "" when none is near."""
    by_lower = {name.lower(): name for name in shipped}
    stem = os.path.splitext(os.path.basename(os.fspath(path)))[0].lower()
    near = difflib.get_close_matches(stem, list(by_lower), n=1)
    return f" Did you mean the shipped config '{by_lower[near[0]]}'?" if near else ""
