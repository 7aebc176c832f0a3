"""What the reliability tests tried, counted as they run and printed at the end of the session
(docs/reliability.md's "What the suite tries" table quotes a full run): ``add("config documents: damaged", 1)`` from
a test, ``note(key, text)`` for a measured figure."""
from collections import OrderedDict

COUNTS = OrderedDict()
NOTES = OrderedDict()


def add(key, amount=1):
    COUNTS[key] = COUNTS.get(key, 0) + amount


def note(key, text):
    NOTES[key] = text


def lines():
    return [f"{key}: {value}" for key, value in COUNTS.items()] + [f"{key}: {text}" for key, text in NOTES.items()]


def export():
    """What this process counted, as plain lists (a pytest-xdist worker hands it to the controller)."""
    return {"counts": list(COUNTS.items()), "notes": list(NOTES.items())}


def merge(exported):
    """Add what another process counted (``export``'s value, or None)."""
    for key, amount in (exported or {}).get("counts", ()):
        add(key, amount)
    for key, text in (exported or {}).get("notes", ()):
        note(key, text)
