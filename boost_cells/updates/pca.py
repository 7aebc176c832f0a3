"""The PCA matrix of DimReduce: the top principal directions of a weight trajectory, NumPy only.

Sources (the config's ``dim_reduce`` section):

- ``pca_mat_path`` names an existing ``.npy``: it is loaded; its shape must be ``(n_components, n)`` with ``n`` the
  number of weight elements.
- otherwise ``weight_load_dir`` holds ``*.ckpt`` files of the network (the warm-up's checkpoints, read in file-name
  order, only the trained weights, by name). Their rows form the trajectory matrix ``X`` (checkpoints x n); the
  components are the top right singular vectors of the centred ``X``, by a randomized SVD seeded with ``seed``.
  If ``pca_mat_path`` is set but does not exist yet, the result is written there (``np.save``, by rank 0 only,
  atomically through a temporary file) so later runs and resumed runs reuse exactly the same matrix. Nothing else
  is written anywhere; in particular nothing goes into ``weight_load_dir``.

Files are read as data only: the ``.npy`` with ``allow_pickle=False`` (a pickled object array is refused, never
run), checkpoints with their CRC checked when they carry one (``ModelCheckpoint`` with ``CheckpointConfig(
crc_check=True)``). A matrix this module writes gets a ``<pca_mat_path>.sha256`` beside it, checked on every
load, so a flipped bit in the data is caught too (a ``.npy`` has no checksum of its own). A file that cannot be
read, fails its checksum or holds a non-finite value is an error naming the file; so is a ``pca_mat_path`` that
cannot be written, before any work is done.
"""
import hashlib
import io
import os
import tempfile

import numpy as np
from mindspore import load_checkpoint

from ..files import write_atomic

__all__ = ["load_trajectory", "pca_matrix", "randomized_pca"]


def _fail(message):
    raise ValueError(f"For 'DimReduce', {message}")


def load_trajectory(weight_load_dir, weights):
    """The trajectory matrix (checkpoints x n, float64) of ``weights`` (Parameters, read by name) in every
    ``*.ckpt`` of ``weight_load_dir``, files in name order; rows are the weights flattened and concatenated."""
    if not os.path.isdir(weight_load_dir):
        _fail(f"'dim_reduce.weight_load_dir' must be an existing directory of checkpoints, but got "
              f"'{weight_load_dir}', which does not exist or is not a directory.")
    files = sorted(name for name in os.listdir(weight_load_dir) if name.endswith(".ckpt"))
    rows = []
    for name in files:
        path = os.path.join(weight_load_dir, name)
        try:
            saved = load_checkpoint(path, crc_check=True)
        except (ValueError, RuntimeError, OSError, TypeError) as error:
            _fail(f"checkpoint '{path}' in 'dim_reduce.weight_load_dir' cannot be read ({error}): it is truncated "
                  "or corrupted; remove it or replace it with a good copy.")
        row = []
        for weight in weights:
            if weight.name not in saved:
                _fail(f"checkpoint '{name}' in 'dim_reduce.weight_load_dir' ({weight_load_dir}) has no parameter "
                      f"'{weight.name}': the checkpoints are of another network.")
            value = saved[weight.name].asnumpy()
            if value.shape != tuple(weight.shape):
                _fail(f"parameter '{weight.name}' in checkpoint '{name}' has shape {value.shape} but the network's "
                      f"has shape {tuple(weight.shape)}: the checkpoints are of another network.")
            if not np.all(np.isfinite(value)):
                _fail(f"parameter '{weight.name}' in checkpoint '{path}' holds inf or nan: a trajectory with "
                      "non-finite weights gives a non-finite PCA matrix.")
            row.append(value.astype(np.float64).ravel())
        rows.append(np.concatenate(row))
    if not rows:
        return np.zeros((0, sum(int(np.prod(w.shape)) for w in weights)))
    return np.stack(rows)


def randomized_pca(data, n_components, seed, oversample=10, power_iterations=2):
    """The top ``n_components`` principal directions (rows, float64, orthonormal) of ``data`` (samples x n).

    Randomized SVD (Halko, Martinsson and Tropp 2011) of the centred data: a Gaussian test matrix drawn from
    ``np.random.default_rng(seed)`` with ``oversample`` extra columns, ``power_iterations`` QR-orthonormalised
    power iterations, then an exact SVD of the small projected matrix. With fewer samples than
    ``n_components + oversample`` (the usual case: tens of checkpoints) the range is found exactly. Each direction's
    sign is fixed so that its entry of largest magnitude is positive: the result depends only on data and seed.
    """
    centred = data - data.mean(axis=0)
    samples, features = centred.shape
    width = min(n_components + oversample, samples, features)
    test = np.random.default_rng(seed).standard_normal((features, width))
    basis, _ = np.linalg.qr(centred @ test)
    for _ in range(power_iterations):
        basis, _ = np.linalg.qr(centred @ (centred.T @ basis))
    _, _, right = np.linalg.svd(basis.T @ centred, full_matrices=False)
    components = right[:n_components]
    largest = np.argmax(np.abs(components), axis=1)
    return components * np.sign(components[np.arange(len(components)), largest])[:, None]


def pca_matrix(section, weights, rank=0):
    """The PCA matrix (n_components x n, float32) for ``weights`` from the ``dim_reduce`` config section.

    Raises:
        ValueError: neither source given, a missing path, a matrix or checkpoints of another network, or too few
            checkpoints for ``n_components`` (a centred trajectory of m checkpoints has rank at most m - 1).
    """
    n_components, path, folder = section["n_components"], section["pca_mat_path"], section["weight_load_dir"]
    size = sum(int(np.prod(w.shape)) for w in weights)
    if path is not None and not path.endswith(".npy"):
        _fail(f"'dim_reduce.pca_mat_path' must name a '.npy' file, but got '{path}'.")
    if path is not None and os.path.isfile(path):
        matrix = _load_matrix(path)
        if matrix.shape != (n_components, size):
            _fail(f"the matrix in 'dim_reduce.pca_mat_path' ({path}) has shape {matrix.shape}, but n_components "
                  f"{n_components} and the network's {size} weight elements need ({n_components}, {size}): it "
                  "belongs to another network or another n_components.")
        return matrix.astype(np.float32)
    if folder is None:
        if path is None:
            _fail("the 'dim_reduce' feature needs 'dim_reduce.pca_mat_path' (a .npy PCA matrix) or "
                  "'dim_reduce.weight_load_dir' (a directory of warm-up checkpoints), but both are null.")
        _fail(f"'dim_reduce.pca_mat_path' ({path}) does not exist and no 'dim_reduce.weight_load_dir' is given to "
              "compute it from.")
    if path is not None and rank == 0:
        _check_writable(path)  # before the trajectory is read and decomposed, not after
    data = load_trajectory(folder, weights)
    if data.shape[0] < n_components + 1:
        _fail(f"'dim_reduce.weight_load_dir' ({folder}) holds {data.shape[0]} checkpoint(s), but n_components "
              f"{n_components} needs at least {n_components + 1} (the centred trajectory of m checkpoints has rank "
              "at most m - 1): save more warm-up checkpoints or lower 'dim_reduce.n_components'.")
    if n_components > size:
        _fail(f"'dim_reduce.n_components' ({n_components}) must be <= the network's {size} weight elements.")
    matrix = randomized_pca(data, n_components, section["seed"]).astype(np.float32)
    if path is not None and rank == 0:
        _save_atomic(path, matrix)
    return matrix


def _digest_path(path):
    return path + ".sha256"


def _load_matrix(path):
    """The matrix in the ``.npy`` at ``path`` (data only, no pickle), float32 and finite, matching its ``.sha256``
    when there is one; raises naming the file."""
    if os.path.isfile(_digest_path(path)):
        with open(path, "rb") as handle:
            actual = hashlib.sha256(handle.read()).hexdigest()
        with open(_digest_path(path), encoding="ascii", errors="replace") as handle:
            expected = handle.read().strip()
        if actual != expected:
            _fail(f"'dim_reduce.pca_mat_path' ({path}) does not match its checksum {_digest_path(path)}: the file is "
                  "truncated or corrupted; delete both to have the matrix computed again.")
    try:
        matrix = np.load(path, allow_pickle=False)
    except Exception as error:  # pylint: disable=broad-except  (a damaged header: SyntaxError, TokenError, ...)
        _fail(f"'dim_reduce.pca_mat_path' ({path}) cannot be read as a .npy matrix ({error}): it is truncated, "
              "corrupted or not a plain numeric array; delete it to have it computed again from "
              "'dim_reduce.weight_load_dir'.")
    if not isinstance(matrix, np.ndarray) or matrix.dtype.kind not in "fiu":
        _fail(f"'dim_reduce.pca_mat_path' ({path}) must hold a real numeric matrix, but holds dtype "
              f"{getattr(matrix, 'dtype', type(matrix).__name__)}.")
    if not np.all(np.isfinite(matrix)):
        _fail(f"'dim_reduce.pca_mat_path' ({path}) holds inf or nan; delete it to have it computed again.")
    return matrix


def _check_writable(path):
    """Raise naming ``path`` unless a file can be created beside it (its directory exists and takes files)."""
    directory = os.path.dirname(os.path.abspath(path))
    try:
        with tempfile.NamedTemporaryFile(dir=directory, prefix=".probe-", delete=True):
            pass
    except OSError as error:
        _fail(f"'dim_reduce.pca_mat_path' ({path}) cannot be written ({error.strerror or error}): the computed "
              "matrix is saved there; give a path in an existing, writable directory.")


def _save_atomic(path, matrix):
    """The matrix as ``.npy`` and its SHA-256 beside it, each written atomically: readers (a later or resumed run)
    see no file or a whole one. The checksum goes first, so a crash between the two leaves a checksum without a
    matrix (which is then computed again), never a matrix with a stale checksum."""
    buffer = io.BytesIO()
    np.save(buffer, matrix, allow_pickle=False)
    data = buffer.getvalue()
    write_atomic(_digest_path(path), hashlib.sha256(data).hexdigest() + "\n")
    write_atomic(path, data)
