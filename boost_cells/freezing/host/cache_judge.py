"""The frozen-prefix cache's measured rules: whether its samples repeat and whether they fit its memory, which the
frozen levels' route asks between steps (host-side). Each rule returns None (go on) or its verdict, a sentence that
names the key and gives the measured figures; the route hands a verdict to the policy
(``boost_cells.freezing.host.policy``), which drops the cache with it. Whether the cache pays for its compiles, waits
for a deeper level or keeps its steps is the policy's. The rules need the run's steps per epoch.

- Whether samples repeat, before it fills ("auto"; ``probe``): from the run's first call, before anything is
  frozen, the route shows it every batch; it keeps each sample's fingerprint (``fingerprints``, about 100 bytes of
  host memory a sample, for an epoch and an eighth) and counts, an epoch on, how many of those it looks at it had
  seen (``RepeatWindow``, from call 0). Where fewer than ``REPEAT_SHARE`` of what repeating samples would give
  (augmentation), it never fills: the fill and its compiles are not paid for nothing. The policy waits for the
  verdict before a fill.
- The data cannot fit ``cache_max_mb`` (``after_step``): at a level's first outputs, an epoch's samples (over all
  ranks: each rank's cache holds what every rank computed) times the bytes of one sample's output exceed the cache's
  memory, so the cache would fill and then compute most samples anyway.
- Samples do not repeat (augmentation; ``after_step``): an epoch after its first cached step, over an eighth of an
  epoch (``RepeatWindow``), fewer than ``REPEAT_SHARE`` of the share of looked-up samples it had seen before that
  samples repeating every epoch would give (``FrozenPrefixCache.repeats``). Data-parallel, the ranks' counts are
  summed (the route's ``reduce``), so every rank decides alike; as the ranks shared their outputs over the epoch
  before, the bar is the same as stand-alone.
"""
from .prefix_cache import fingerprints

__all__ = ["CacheJudge", "RepeatWindow"]

_AUTO = "'grad_freeze.cache_frozen_prefix' \"auto\""


class CacheJudge:
    """The frozen-prefix cache's measured rules (see the module docstring), with what they have measured so far.

    Args:
        cache (FrozenPrefixCache): the cache judged (its ``row_bytes`` and ``max_bytes``).
        probe (bool): whether the probe looks at the run's first batches for whether samples repeat ("auto");
            False: taken as repeating (true: the cache serves from a level's first step).
        ranks (int): the data-parallel ranks (1 stand-alone).

    Attributes:
        repeats (bool): the probe's verdict, whether samples repeat; None until known.
    """

    REPEAT_SHARE = 0.5  # the least share of repeated samples at which caching pays

    def __init__(self, cache, probe, ranks=1):
        self.cache, self.ranks = cache, int(ranks)
        self.window = None  # the RepeatWindow, from the first cached step on
        self.repeats = None if probe else True
        self._probe_window, self._probe_seen = None, set()

    @property
    def probing(self):
        """Whether ``probe`` wants to see the batches (until its verdict)."""
        return self.repeats is None

    def probe(self, call, inputs, steps_per_epoch, reduce, known):
        """Look at call ``call``'s batch (numpy, (n, ...)): keep its fingerprints, and, an epoch on, count the ones
        seen before; at the window's end, the verdict (``repeats``), or the reason to step aside where samples do
        not repeat. ``reduce`` sums a float32 array over the ranks. ``known``: called once, at the probe's first
        call, for the verdict measured before (a resumed run's ledger), taken as it is; None: probe."""
        if self._probe_window is None:
            verdict = known()
            if verdict is not None:
                self.repeats = verdict
                return None if verdict else (f"The frozen-prefix cache ({_AUTO}) will not fill: the run measured, "
                                             "before it was resumed, that its samples do not repeat from epoch to "
                                             "epoch (augmentation). Set the key to false to silence this.")
            self._probe_window = RepeatWindow(call, steps_per_epoch)
        keys = fingerprints(inputs)
        counts = self._probe_window.counts(call, len(keys), sum(key in self._probe_seen for key in keys))
        if call < self._probe_window.start:
            self._probe_seen.update(keys)
        if counts is None:
            return None
        self._probe_seen = set()
        share, expected = self._probe_window.shares(reduce(counts), self.ranks)
        self.repeats = bool(share >= self.REPEAT_SHARE * expected)
        if self.repeats:
            return None
        return (f"The frozen-prefix cache ({_AUTO}) will not fill: an epoch into the run, only {share:.0%} of the "
                "samples it looked at had been seen before, where samples that repeat every epoch would give about "
                f"{expected:.0%} (augmentation changes them every epoch), so nothing cached would be used again. Set "
                "the key to false to silence this.")

    def after_step(self, call, level, rows, new_level, repeated, steps_per_epoch, reduce):
        """The memory and repeat rules after cached call ``call`` (from 0, the run's start) at ``level``: ``rows``
        samples, ``new_level`` (the level's first outputs), ``repeated`` of them seen before; ``reduce`` sums a
        float32 array over the ranks (the identity stand-alone)."""
        samples = steps_per_epoch * rows * self.ranks
        needed = samples * self.cache.row_bytes.get(level, 0)
        if new_level and needed > self.cache.max_bytes:
            return (f"The frozen-prefix cache steps aside: an epoch's {samples} samples need about "
                    f"{needed / 2 ** 20:.0f} MB at frozen level {level}, more than 'grad_freeze.cache_max_mb' "
                    f"({self.cache.max_bytes / 2 ** 20:.0f} MB), so it would fill and then compute most samples "
                    "anyway. The frozen prefix now runs inside the compiled step; raise the key to cache.")
        if self.window is None:
            self.window = RepeatWindow(call, steps_per_epoch)
        counts = self.window.counts(call, rows, repeated)
        if counts is None:
            return None
        # summed over the ranks, so every rank decides alike (a dropped cache runs the prefix in training mode); the
        # ranks shared their outputs, so each rank's cache saw every rank's samples
        share, expected = self.window.shares(reduce(counts), 1)
        if share >= self.REPEAT_SHARE * expected:
            return None
        return (f"The frozen-prefix cache steps aside: after an epoch of caching, only {share:.0%} of the samples it "
                "looked up had been seen before, where samples that repeat every epoch would give about "
                f"{expected:.0%} (augmentation changes them every epoch), so fingerprinting "
                "and storing them costs more than it saves. The frozen prefix now runs inside the compiled step; set "
                "'grad_freeze.cache_frozen_prefix' to false to silence this.")


class RepeatWindow:
    """When and over which steps the frozen-prefix cache measures how often samples repeat.

    A sample comes once an epoch. The cache started at call ``first`` (counted from the run's start, an epoch being
    ``epoch`` calls); a sample looked up one epoch later (call ``first + epoch`` on) came before at a uniformly random
    place of the epoch before (shuffled data) or at the same place (unshuffled), so it was seen by the cache with
    probability ``expected = (epoch - first % epoch) / epoch`` or more, if samples repeat. Where that is below a
    quarter (the cache started late in its epoch), the window waits one epoch more (``expected`` 1). The window spans
    ``max(2, epoch // 8)`` calls.
    """

    def __init__(self, first, epoch):
        self.expected = (epoch - first % epoch) / epoch
        self.start = first + epoch
        if self.expected < 0.25:
            self.start, self.expected = self.start + epoch, 1.0
        self.length = max(2, epoch // 8)
        self.rows = self.repeated = 0
        self.closed = False

    def counts(self, call, rows, repeated):
        """``(samples, repeated samples)`` over the window when it closes (once), else None; ``call``: this call's
        index from the run's start, ``rows`` and ``repeated``: its samples and how many of them the cache had seen."""
        if self.closed or call < self.start:
            return None
        self.rows += rows
        self.repeated += repeated
        if call < self.start + self.length - 1:
            return None
        self.closed = True
        return self.rows, self.repeated

    def shares(self, counts, ranks):
        """``(share seen, share expected)``: of the window's samples (``counts`` as ``counts`` returned them, summed
        over ``ranks`` data-parallel ranks), the share seen before, and the share samples that repeat every epoch
        would give a rank (``expected`` over ``ranks``: a sampler that deals the samples out anew every epoch
        brings a rank each sample about once in that many epochs)."""
        return counts[1] / max(1.0, counts[0]), self.expected / ranks
