"""How boost_cells writes its files (overflow reports, the monitor log, the PCA matrix), so that a crash never
leaves half a file behind.

- ``writable_path(who, arg, path)``: check at construction that ``path`` can be written (its directory is made if
  missing), so a bad path fails when the object is built, not at step 50,000 when the first report is due.
- ``write_atomic(path, data)``: a whole file (an overflow report, the PCA matrix and its checksum; ``data`` is str
  or bytes): written to a temporary file in the same directory, flushed to disk, then renamed over ``path``; a
  reader sees the old file or the new one, never part.
- ``append_line(fd, text)``: one JSON Lines record appended with a single ``write`` on a descriptor opened with
  ``O_APPEND``: a killed process leaves whole lines (the kernel completes or never starts the call); only a power
  loss can leave a torn last line, which the readers drop.
"""
import os
import tempfile

__all__ = ["append_line", "open_append", "write_atomic", "writable_path"]


def writable_path(who, arg, path):
    """``path`` as a string, after checking that a file can be written there.

    The parent directory is created when missing. An existing directory at ``path``, a parent that is a file, or
    a directory that refuses a new file raise ``ValueError`` naming ``arg`` and the path.
    """
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"For '{who}', '{arg}' must be a path string, but got {type(path).__name__}.")
    path = os.fspath(path)
    if not path:
        raise ValueError(f"For '{who}', '{arg}' must be a file path, but got ''.")
    if os.path.isdir(path):
        raise ValueError(f"For '{who}', '{arg}' must be a file path, but '{path}' is a directory.")
    directory = os.path.dirname(os.path.abspath(path))
    try:
        os.makedirs(directory, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=directory, prefix=".probe-", delete=True):
            pass
    except OSError as error:
        raise ValueError(f"For '{who}', '{arg}' must be a writable file path, but '{path}' cannot be written: "
                         f"{error.strerror or error}.") from error
    return path


def write_atomic(path, data):
    """Write ``data`` (str, as UTF-8, or bytes) to ``path`` through a temporary file in the same directory and a
    rename."""
    directory = os.path.dirname(os.path.abspath(path))
    handle, temporary = tempfile.mkstemp(dir=directory, prefix="." + os.path.basename(path) + ".", suffix=".tmp")
    try:
        with os.fdopen(handle, "wb") as stream:
            stream.write(data.encode("utf-8") if isinstance(data, str) else data)
            stream.flush()
            os.fsync(stream.fileno())
        os.replace(temporary, path)
    except BaseException:
        if os.path.exists(temporary):
            os.remove(temporary)
        raise


def open_append(path):
    """A descriptor of ``path`` for appending (created if missing)."""
    return os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)


def append_line(fd, text):
    """Append ``text`` plus a newline to the ``O_APPEND`` descriptor ``fd`` in one ``write`` call."""
    data = (text + "\n").encode("utf-8")
    while data:
        written = os.write(fd, data)
        data = data[written:]
