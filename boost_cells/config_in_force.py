"""The config in force in the process: the one process-wide value the reference's API implies.

``mindspore.boost`` keeps one ``AutoBoost`` per process and its train cells read the config back with
``self.auto_boost = AutoBoost()``; code written for it does the same. Here that value is a ``BoostConfig`` held in
this module, and nothing else in the package keeps state at module level. ``AutoBoost(level, config)`` sets it
(``set_latest_config``) and the later config holds: replacing a different one warns once, naming both (the reference
silently keeps the first). ``AutoBoost()`` with no arguments reads it back (``latest_config``), and so do train cells
built without ``boost_config=``. ``reset_latest_config()`` forgets it (the test suite does so around every test).
"""
from .config import BoostConfig
from .user_warnings import warn_user

__all__ = ["latest_config", "reset_latest_config", "set_latest_config"]

_latest = None  # the config in force (the latest AutoBoost(level, config)'s), or None: level O0


def latest_config():
    """The config in force: the ``BoostConfig`` of the latest ``AutoBoost(level, config)``, or level O0 when none
    was made (or after ``reset_latest_config``)."""
    return _latest if _latest is not None else BoostConfig.level("O0")


def set_latest_config(config, who="AutoBoost"):
    """Put ``config`` (a BoostConfig, a dict or a JSON path) in force; returns it as a BoostConfig.

    Warns:
        BoostConfigWarning: ``config`` replaces a different config put in force before (not the O0 that holds when
            none was): the warning names both, and says that the new one holds for train cells built from now on
            without ``boost_config=``. ``who`` names the caller in it.

    Raises:
        TypeError, ValueError: as ``BoostConfig.coerce``.
    """
    global _latest  # pylint: disable=global-statement
    config = BoostConfig.coerce(config)
    if _latest is not None and _latest != config:
        warn_user(f"For '{who}', the config in force {_latest!r} is replaced by {config!r} "
                  f"({_differences(_latest, config)}): train cells built from now on without 'boost_config=' use the "
                  "new one (mindspore.boost would silently keep the first). Pass 'boost_config=' to a train cell to "
                  "train with a config of its own, or AutoBoost() with no arguments to read the config in force "
                  "without replacing it.")
    _latest = config
    return config


def _differences(old, new):
    """The keys where ``new`` differs from ``old``, in words: "'grad_accumulation.grad_accumulation_step' 4 -> 2"."""
    def flat(config):
        return {f"{section}.{key}" if key else section: value
                for section, values in config.to_dict().items()
                for key, value in (values.items() if isinstance(values, dict) else [("", values)])}

    before, after = flat(old), flat(new)
    return ", ".join(f"'{path}' {before.get(path)!r} -> {after.get(path)!r}"
                     for path in sorted(set(before) | set(after)) if before.get(path) != after.get(path))


def reset_latest_config():
    """Forget the config in force: ``latest_config()`` is level O0 again, and the next ``set_latest_config`` replaces
    nothing."""
    global _latest  # pylint: disable=global-statement
    _latest = None
