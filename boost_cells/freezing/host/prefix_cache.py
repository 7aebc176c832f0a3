"""The outputs of a network prefix frozen for good, cached so that its forward pass is skipped too (Egeria).

Gradient freezing saves the backward pass of the front layers; their forward pass still runs every step. Once the
front stages are frozen for good they map each sample to the same output every epoch, so the output is computed
once and the suffix trains on it. ``staged_network`` finds the stages of a network (an ``nn.SequentialCell`` or a
``Stages``, seen through ``nn.WithLossCell`` and ``LessBN``); ``Stages`` and ``split_stages`` cut it into pieces over
the same cells (parameter names unchanged, so checkpoints still load into the plain network); ``FrozenPrefixCache``
serves a batch's prefix outputs and is never stale:

- a cached output is used only for the same input: entries are keyed by a fingerprint of each sample's bytes
  (xxHash's XXH3, 128 bits, over the row in place: about 0.01 s for a batch of 256 images of 3x224x224 float32 on
  one core, where BLAKE2b took 0.15 s), so shuffled batches hit, and augmented (changed) samples miss and are
  computed;
- the prefix's Parameters (weights and BatchNorm statistics) are compared on every lookup, on the device, with the
  copy taken when their outputs were first cached (``PrefixSnapshot``: one compiled graph of a few kernels and
  one read of a flag per segment, whatever the prefix's size): after a checkpoint load, a training-mode forward
  pass or any other write, the cache is dropped (with a warning) and refilled;
- when more stages freeze, cached entries are extended through the newly frozen stages only;
- data-parallel, the ranks can share what they compute (a call's ``exchange``): each rank stores the outputs the
  others computed too, so where a sampler deals the samples out anew every epoch a rank's cache holds every sample
  after one epoch, where alone it would meet each about once in as many epochs as there are ranks.

The prefix runs in inference mode: its BatchNorms normalise with their moving statistics, which no longer change.
A training-mode BatchNorm's output depends on the rest of the batch, so it could not be cached; this is the one way
a cached run differs from freezing alone.
"""
import time
import warnings

import numpy as np
import xxhash
from mindspore import Parameter, ParameterTuple, Tensor, nn, ops
from mindspore.common import dtype as mstype

from ...mindspore_internals import with_loss_cell_parts
from ...rules import is_int

__all__ = ["FrozenPrefixCache", "PrefixSnapshot", "StagedNetwork", "Stages", "fingerprints", "split_stages",
           "staged_network"]


def fingerprints(inputs):
    """One key per sample of ``inputs`` (numpy, (n, ...)): its dtype, shape and the XXH3-128 digest of its bytes."""
    kind = (str(inputs.dtype), inputs.shape[1:])
    return [(kind, xxhash.xxh3_128_digest(row)) for row in np.ascontiguousarray(inputs)]


class Stages(nn.Cell):
    """Cells run one after the other, like ``nn.SequentialCell``, but without renaming their parameters.

    ``nn.SequentialCell`` renames parameters by position (a slice of it turns ``2.weight`` into ``1.weight``);
    this keeps every parameter's name, so a prefix or suffix shares names, and checkpoints, with the whole. Declare
    a network's stages by building it as ``Stages([...])`` (or an ``nn.SequentialCell``).

    Args:
        cells (list of Cell): the stages, in order.

    Inputs: ``x``, the first stage's input. Outputs: the last stage's output.
    """

    def __init__(self, cells):
        super().__init__(auto_prefix=False)
        cells = list(cells)
        if not cells or not all(isinstance(cell, nn.Cell) for cell in cells):
            raise TypeError(f"For 'Stages', 'cells' must be a non-empty list of Cells, but got {cells!r}.")
        self.layers = nn.CellList(cells, auto_prefix=False)

    def __len__(self):
        return len(self.layers)

    def __iter__(self):
        return iter(self.layers)

    def construct(self, x):
        for cell in self.layers:
            x = cell(x)
        return x


def split_stages(network, index):
    """``(prefix, suffix)``: ``Stages`` over the first ``index`` stages of ``network`` and over the rest.

    Args:
        network (nn.SequentialCell or Stages): the staged network; its cells are shared, not copied.
        index (int): number of stages in the prefix, in [1, len(network) - 1].

    Raises:
        TypeError: ``network`` is not staged. ValueError: ``index`` out of range.
    """
    if not isinstance(network, (nn.SequentialCell, Stages)):
        raise TypeError(f"For 'split_stages', 'network' must be an nn.SequentialCell or Stages, but got "
                        f"{type(network).__name__}.")
    cells = list(network)
    if not is_int(index) or not 1 <= index < len(cells):
        raise ValueError(f"For 'split_stages', 'index' must be an int in [1, {len(cells) - 1}] (the network has "
                         f"{len(cells)} stages), but got {index!r}.")
    return Stages(cells[:index]), Stages(cells[index:])


class StagedNetwork:
    """What ``staged_network`` found: ``stages`` (list of Cell), ``loss_fn`` (the ``nn.WithLossCell``'s loss, or
    None for a network without loss) and ``less_bn`` (whether the network is under ``LessBN``)."""

    def __init__(self, stages, loss_fn, less_bn):
        self.stages, self.loss_fn, self.less_bn = stages, loss_fn, less_bn

    def suffix_with_loss(self, start):
        """``nn.WithLossCell`` over ``Stages(stages[start:])`` and the loss: the network the suffix trains, taking
        the prefix's output where the whole took the input (``less_bn`` flagged as the whole was)."""
        suffix = Stages(self.stages[start:])
        if self.less_bn:
            suffix.set_boost("less_bn")
            suffix.add_flags(defer_inline=True)
        return nn.WithLossCell(suffix, self.loss_fn)


def staged_network(network, who="grad_freeze.cache_frozen_prefix"):
    """The stages of ``network``: an ``nn.SequentialCell`` or ``Stages``, possibly under ``LessBN`` and in an
    ``nn.WithLossCell`` (which may itself be under ``LessBN``).

    Raises:
        TypeError: naming ``who``, when ``network`` has no stages that can be split.
    """
    less_bn, loss_fn, inner = False, None, network
    for _ in range(4):
        if type(inner).__name__ == "LessBN" and isinstance(getattr(inner, "network", None), nn.Cell):
            inner, less_bn = inner.network, True
        elif isinstance(inner, nn.WithLossCell) and loss_fn is None:
            inner, loss_fn = with_loss_cell_parts(inner)
        else:
            break
    if isinstance(inner, (nn.SequentialCell, Stages)) and len(list(inner)) >= 2:
        return StagedNetwork(list(inner), loss_fn, less_bn)
    raise TypeError(f"'{who}' needs a network whose stages can be split: an nn.SequentialCell or "
                    "boost_cells.Stages of at least 2 stages (optionally in an nn.WithLossCell and under "
                    f"LessBN), but got {type(inner).__name__}. Build the network as Stages([...]) to declare its "
                    "stages, or set 'cache_frozen_prefix' to false: freezing works without the cache.")


class PrefixSnapshot(nn.Cell):
    """A copy of each segment's Parameters (weights and BatchNorm statistics), and whether each segment still equals
    its copy: the cache's validity check, on the device.

    One graph compares every segment (exact equality, element by element; NaN never equals itself, so a NaN counts
    as a change), so the host's cost per check is one launch and one read of ``len(segments)`` flags whatever the
    prefix's size. Inside it a segment's Parameters of one dtype are flattened into one vector (one Concat; the
    reshapes are free) and compared with one flat copy, so a check runs a few kernels a segment, not three a
    Parameter, whose launches cost more than their work: on a prefix of 50 Parameters (a ResNet of width 32) a check
    took 2.45 ms here that way, and takes 0.85 ms so. The copies are held outside the train cell's Cell tree (by the
    cache), so checkpoints do not hold them; they cost the device the memory of the segments' Parameters.

    Args:
        segments (list of Cell): the segments to watch.

    Inputs: none. Outputs: bool Tensor of shape (len(segments),): segment ``j`` equals its copy.
    """

    def __init__(self, segments):
        super().__init__(auto_prefix=False)
        params, copies, groups = [], [], []  # groups[j]: segment j's (start, stop, copy) a dtype
        for j, segment in enumerate(segments):
            by_dtype = {}
            for param in segment.get_parameters():
                by_dtype.setdefault(param.dtype, []).append(param)
            ranges = []
            for members in by_dtype.values():
                ranges.append((len(params), len(params) + len(members), len(copies)))
                copies.append(Parameter(Tensor(np.zeros(sum(param.size for param in members)), members[0].dtype),
                                        name=f"prefix_snapshot.{j}.{len(copies)}", requires_grad=False))
                params += members
            groups.append(tuple(ranges))
        self.groups = tuple(groups)  # params[start:stop] flattened is copies[copy]
        self.params = ParameterTuple(params)
        self.copies = ParameterTuple(copies)

    def _flat(self, start, stop):
        """Parameters ``start`` to ``stop - 1`` (one dtype) as one vector."""
        parts = ()
        for index in range(start, stop):
            parts += (ops.reshape(self.params[index], (-1,)),)
        return ops.concat(parts)

    def take(self, segment):
        """Copy segment ``segment``'s current Parameters (written into the copies' memory by ``ops.assign``)."""
        for start, stop, copy in self.groups[segment]:
            ops.assign(self.copies[copy], self._flat(start, stop))

    def construct(self):
        flags = ()
        for ranges in self.groups:
            same = ops.ones((), mstype.bool_)
            for start, stop, copy in ranges:
                same = ops.logical_and(same, ops.all(ops.equal(self._flat(start, stop), self.copies[copy])))
            flags += (same,)
        return ops.stack(flags)


class FrozenPrefixCache:
    """Prefix outputs by sample, for a prefix that grows segment by segment; see the module docstring.

    Args:
        segments (list of Cell): ``segments[j]`` maps the output of segments ``0..j-1`` (the input for ``j = 0``)
            to the next; a prefix of level ``k`` is ``segments[:k]``. Run in inference mode (``set_train(False)``
            before each call).
        max_bytes (int): at most this many bytes of cached outputs; past it, new samples are computed every time
            they come (with one warning), never evicting what is cached.

    Attributes:
        seconds (float): wall time spent running segments (filling and extending), in seconds.
        hits, misses (int): samples served from the cache and computed.
        received (int): outputs other ranks computed and this cache stored (``exchange``).
        repeats (int): looked-up samples the cache had seen before, at any level (a hit, or an entry extended through
            newly frozen stages): how often samples repeat, what decides whether the cache pays.
        row_bytes (dict): ``{level: bytes of one sample's output}``, once a level's outputs were computed.
    """

    def __init__(self, segments, max_bytes):
        self.segments = list(segments)
        self.snapshot = PrefixSnapshot(self.segments)
        self.max_bytes = int(max_bytes)
        self.entries = {}  # sample fingerprint -> (level, output row)
        self.bytes = 0
        self.watched = 0  # the leading segments whose copy was taken (and which their entries' outputs came from)
        self.seconds, self.hits, self.misses, self.repeats, self.received = 0.0, 0, 0, 0, 0
        self.row_bytes = {}
        self.spans = {}  # (first segment, last segment + 1) -> Stages over them
        self.full_warned = False

    def _check_prefix(self, level):
        """Drop everything if a segment of the level-``level`` prefix changed since its copy was taken (one
        comparison graph per call), then take the copies of the segments that joined the prefix."""
        if level == 0:
            return
        same = self.snapshot().asnumpy()
        if not same[:min(level, self.watched)].all():
            warnings.warn("The frozen prefix changed: its weights or BatchNorm statistics differ from when its outputs "
                          "were cached (a checkpoint load, a training-mode forward pass or a write); its cached "
                          "outputs are dropped and recomputed.", RuntimeWarning, stacklevel=4)
            self.clear()
            self.watched = 0
        for segment in range(self.watched, level):
            self.snapshot.take(segment)
        self.watched = max(self.watched, level)

    @staticmethod
    def _run(segment, rows):
        """``segment`` in inference mode on ``rows`` (numpy, (n, ...)). Its graph takes any number of rows (its
        first input's leading dimension is declared dynamic on the first call), so a batch with a few new samples
        runs only those: one compile per segment, and a fill costs what its rows cost."""
        if segment.get_inputs() is None:
            segment.set_inputs(Tensor(shape=[None, *rows.shape[1:]], dtype=Tensor(rows[:1]).dtype))
        segment.set_train(False)
        return segment(Tensor(rows)).asnumpy()

    def _store(self, key, level, row):
        """Cache ``row`` for ``key`` at ``level``; False where the cache is full."""
        if key in self.entries:
            self.bytes -= self.entries[key][1].nbytes
        elif self.bytes + row.nbytes > self.max_bytes:
            if not self.full_warned:
                warnings.warn(f"The frozen-prefix cache is full ({self.bytes / 2 ** 20:.0f} MB of "
                              f"'grad_freeze.cache_max_mb' {self.max_bytes / 2 ** 20:.0f}); new samples run the prefix "
                              "every time (with augmentation no sample repeats: switch the cache off).",
                              RuntimeWarning, stacklevel=5)
                self.full_warned = True
            return False
        self.entries[key] = (level, row)
        self.bytes += row.nbytes
        return True

    def _span(self, first, last):
        """The segments ``first`` to ``last - 1`` as one ``Stages`` (one compiled graph: a prefix that freezes
        several segments at once is computed in one call, not one per segment)."""
        span = self.spans.get((first, last))
        if span is None:
            span = self.spans[(first, last)] = Stages([cell for segment in self.segments[first:last] for cell in segment])
        return span

    def clear(self):
        """Drop every cached output (the memory is given back)."""
        self.entries.clear()
        self.bytes = 0

    def __call__(self, inputs, level, exchange=None):
        """The level-``level`` prefix's outputs for ``inputs`` (numpy, (n, ...), one sample per row), as a numpy
        array (n, ...) in the prefix's output dtype.

        ``exchange``: None, or a collective every rank calls at the same call, which trades the outputs this call
        computed (``digests``, uint8 (m, 16), the samples' XXH3-128 digests, and ``rows`` (m, ...)) for every rank's
        (the same pair, concatenated over the ranks); what this cache lacks at ``level`` is stored."""
        self._check_prefix(level)
        keys = fingerprints(inputs)
        found = [self.entries.get(key) for key in keys]
        self.repeats += sum(entry is not None for entry in found)
        start = [0 if entry is None or entry[0] > level else entry[0] for entry in found]
        outputs = [entry[1] if entry is not None and entry[0] == level else None for entry in found]
        self.hits += sum(output is not None for output in outputs)
        self.misses += sum(output is None for output in outputs)
        began = time.perf_counter()
        by_start = {}  # the level a missing row's computation starts from -> its row indices
        for i, output in enumerate(outputs):
            if output is None:
                by_start.setdefault(start[i], []).append(i)
        for first, rows in by_start.items():
            sources = np.stack([inputs[i] if first == 0 else found[i][1] for i in rows])
            for i, row in zip(rows, self._run(self._span(first, level), sources)):
                outputs[i] = row.copy()
                self.row_bytes.setdefault(level, row.nbytes)
                self._store(keys[i], level, outputs[i])
        self.seconds += time.perf_counter() - began
        outputs = np.stack(outputs)
        if exchange is not None:
            computed = sorted(i for rows in by_start.values() for i in rows)
            self._absorb(keys[0][0], level, *exchange(self._digests([keys[i] for i in computed]), outputs[computed]))
        return outputs

    @staticmethod
    def _digests(keys):
        """The digests of ``keys`` (``fingerprints``' keys) as uint8 (len(keys), 16)."""
        return np.frombuffer(b"".join(digest for _, digest in keys), np.uint8).reshape(len(keys), 16)

    def _absorb(self, kind, level, digests, rows):
        """Store level-``level`` ``rows`` (other ranks' outputs, for samples of ``kind`` with ``digests``) where this
        cache has nothing at ``level`` for them yet."""
        for digest, row in zip(digests, rows):
            key = (kind, digest.tobytes())
            entry = self.entries.get(key)
            if entry is None or entry[0] < level:
                self.row_bytes.setdefault(level, row.nbytes)
                self.received += self._store(key, level, row.copy())
