"""Whether the frozen-prefix cache pays on the run at hand: the rules the frozen levels' route asks before and while
it caches (host-side, between steps).

Each rule returns None (go on) or the reason to step aside, a sentence that names the key and gives the measured
figures; the route drops the cache with it (``FrozenLevelRoute.drop_cache``). They need the run's steps per epoch.

- Whether samples repeat, before it fills ("auto"; ``probe``): from the run's first call, before anything is
  frozen, the route shows it every batch; it keeps each sample's fingerprint (``fingerprints``, about 100 bytes of
  host memory a sample, for an epoch and an eighth) and counts, an epoch on, how many of those it looks at it had
  seen (``RepeatWindow``, from call 0). Where fewer than ``REPEAT_SHARE`` of what repeating samples would give
  (augmentation), it never fills: the fill and its compiles are not paid for nothing. A run whose front freezes
  before the verdict waits for it.
- Its payback ("auto"; ``weigh``, at the route's weighings, from the ledger's ``Costs``): at a newly frozen level the
  steps run on the batch until the ledger knows that level's step; the cache then starts filling only where
  ``payback.cache_pays`` (the steps left after its fill, times the saving expected, repay its two compiles; the fill
  takes an epoch, data-parallel too, as the ranks share what they compute over that epoch: the route's exchange).
  At a level where it does not pay while the schedule may still freeze deeper (payback allows a deeper level), it
  waits and weighs again there: a deeper prefix's forward pass saves more, and the front freezes group by group
  where steps are dear. The wait has a deadline: while the steps left exceed an epoch's fill plus the two compiles
  over the deeper level's expected saving a step; past it, or once no deeper level is allowed, it steps aside.
  Once it served a few steps whole (every sample a hit, nothing exchanged), the A/B:
  it stays only where those steps measure faster than the level's steps on the batch (at a level the cache reached
  directly, that step as ``expected_saving`` gives it). One way only: a step on the batch after caching would run the
  frozen prefix in training mode and change its BatchNorm statistics, which drops what was cached.
- The data cannot fit ``cache_max_mb`` (``after_step``): at a level's first outputs, an epoch's samples (over all
  ranks: each rank's cache holds what every rank computed) times the bytes of one sample's output exceed the cache's
  memory, so the cache would fill and then compute most samples anyway.
- Samples do not repeat (augmentation; ``after_step``): an epoch after its first cached step, over an eighth of an
  epoch (``RepeatWindow``), fewer than ``REPEAT_SHARE`` of the share of looked-up samples it had seen before that
  samples repeating every epoch would give (``FrozenPrefixCache.repeats``). Data-parallel, the ranks' counts are
  summed (the route's ``reduce``), so every rank decides alike; as the ranks shared their outputs over the epoch
  before, the bar is the same as stand-alone.
"""
from .decisions import Figure
from .payback import cache_pays, cache_saving, cache_saving_source, expected_saving, largest_compile
from .prefix_cache import fingerprints

__all__ = ["CacheJudge", "RepeatWindow"]

_AUTO = "'grad_freeze.cache_frozen_prefix' \"auto\""


class CacheJudge:
    """The frozen-prefix cache's rules (see the module docstring), with what they have measured so far.

    Args:
        cache (FrozenPrefixCache): the cache judged (its ``row_bytes`` and ``max_bytes``).
        payback (bool): whether the cache weighs its payback first ("auto"); False: it caches from a level's first
            step (true), and only the memory and repeat rules apply.
        ranks (int): the data-parallel ranks (1 stand-alone).
        record (callable): ``record(part, action, reason, figures)``, called with each decision that changes what
            the cache does and is not a step aside (those are the returned reasons): it fills, waits for a deeper
            level (once a level, with its deadline), keeps its steps after the A/B. Default: nothing.

    Attributes:
        started (bool): whether the cache serves the frozen steps (from the start without ``payback``).
        compared (bool): whether the A/B of its whole steps against the steps on the batch was made.
    """

    REPEAT_SHARE = 0.5  # the least share of repeated samples at which caching pays

    def __init__(self, cache, payback, ranks=1, record=None):
        self.cache, self.payback, self.ranks = cache, bool(payback), int(ranks)
        self.record = record or (lambda part, action, reason, figures=(): None)
        self._waited = set()  # the levels at which a wait was recorded
        self.started, self.compared = not self.payback, False
        self.window = None  # the RepeatWindow, from the first cached step on
        self.repeats = None if self.payback else True  # the probe's verdict: whether samples repeat; None until known
        self._probe_window, self._probe_seen = None, set()

    def pending(self, level):
        """Whether ``weigh`` still has something to decide at frozen level ``level``."""
        return self.payback and level > 0 and not self.compared

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

    def weigh(self, costs, level, steps_left, steps_per_epoch, deeper=None):
        """Start the cache where it pays, then keep it only where its whole steps beat the level's steps on the
        batch. ``costs``: the ledger's (every rank's mean); ``steps_left``: calls left in the run; ``deeper``: the
        deepest level the schedule may still freeze to, if deeper than ``level`` (None: none). Where the cache does
        not pay at ``level`` but would at ``deeper``, it waits for that level until too few steps are left for a
        fill there to pay (its deadline), then steps aside."""
        if not self.started:
            if level not in costs.step:  # the level's steps on the batch are still being timed
                return None
            if steps_per_epoch is None:
                return (f"The frozen-prefix cache ({_AUTO}) does not start: it cannot weigh whether it pays without "
                        "the run's steps per epoch (an epoch passes before a sample repeats). Give them with the train "
                        "cell's fit_to_run(total_steps, steps_per_epoch) before training (Model.train does), or set "
                        "the key to true to cache regardless.")
            if self.repeats is None:  # the probe has not seen an epoch yet
                return None
            fill = steps_per_epoch  # data-parallel too: the ranks share what they fill
            figures = self._figures(costs, level, steps_left, fill)
            if not cache_pays(costs, level, steps_left, fill):
                return self._wait(costs, level, steps_left, fill, deeper, figures)
            self.started = True
            self.record("cache", "cache: fill", f"at frozen level {level} it pays: over the {steps_left - fill} "
                        f"steps left after its fill ({fill} steps) it saves about "
                        f"{cache_saving(costs, level) * (steps_left - fill):.1f} s, more than its two compiles",
                        figures)
            return None
        if level not in costs.cached_step:
            return None
        self.compared = True
        on_batch = costs.step.get(level, costs.step[0] - expected_saving(costs, level))
        figures = (Figure(f"level {level}'s step on the cache", costs.cached_step[level] * 1e3, "ms"),
                   Figure(f"level {level}'s step on the batch", on_batch * 1e3, "ms",
                          "measured" if level in costs.step else "estimate: the full step less level's saving"))
        if costs.cached_step[level] < on_batch:
            self.record("cache", "cache: keep", f"at frozen level {level} a step it served whole was faster than a "
                        "step on the batch", figures)
            return None
        return (f"The frozen-prefix cache ({_AUTO}) steps aside, as it does not pay on this machine: at frozen level "
                f"{level} a step it served whole took {costs.cached_step[level] * 1e3:.1f} ms, where a step on the "
                f"batch takes {on_batch * 1e3:.1f} ms. The frozen prefix now runs inside the compiled step; set the "
                "key to false to silence this.")

    @staticmethod
    def _figures(costs, level, steps_left, fill):
        """The figures a fill at ``level`` is weighed by."""
        return (Figure(f"level {level}'s step", costs.step[level] * 1e3, "ms"),
                Figure("the cache's saving a step", cache_saving(costs, level) * 1e3, "ms",
                       cache_saving_source(costs, level)),
                Figure("steps left", steps_left, "steps", "the run's length"), Figure("fill", fill, "steps", "an epoch"),
                Figure("each of its two compiles", largest_compile(costs), "s",
                       "estimate: the run's largest measured compile"))

    def _wait(self, costs, level, steps_left, fill, deeper, figures):
        """Where the fill does not pay at ``level``: wait for level ``deeper`` while a fill there can still pay (one
        record a level, with the deadline), else the reason to step aside."""
        deeper_saving = cache_saving(costs, deeper) if deeper is not None else None
        needed = fill + 2 * largest_compile(costs) / deeper_saving if deeper_saving else None
        if needed is not None and steps_left > needed:
            if level not in self._waited:
                self._waited.add(level)
                self.record("cache", "cache: wait", f"at frozen level {level} its fill would not repay its two "
                            f"compiles; it waits for level {deeper}, whose prefix saves more, until {needed:.0f} "
                            f"steps are left (its deadline: a fill there no longer pays after that)",
                            figures + (Figure(f"level {deeper}'s cache saving a step", deeper_saving * 1e3, "ms",
                                              cache_saving_source(costs, deeper)),))
            return None
        if level in self._waited:
            came = ("payback no longer allows a deeper level" if needed is None else
                    f"level {deeper} did not come while a fill there could pay ({steps_left} steps left, {needed:.0f} "
                    "needed)")
            return (f"The frozen-prefix cache ({_AUTO}) does not start: it waited at frozen level {level} for a deeper "
                    f"level, but {came}. The frozen prefix runs inside the compiled step; set the key to false to "
                    "silence this.")
        deeper_too = "" if needed is None else (
            f"; at level {deeper}, which the run may still freeze to, it would save about {deeper_saving * 1e3:.1f} "
            f"ms a step, which needs {needed:.0f} steps left to repay them")
        return (f"The frozen-prefix cache ({_AUTO}) does not start, as it would not pay in this run: at frozen "
                f"level {level} a step takes {costs.step[level] * 1e3:.1f} ms, of which the cache would save "
                f"about {cache_saving(costs, level) * 1e3:.1f} ms (the frozen prefix's forward pass) over the "
                f"{max(0, steps_left - fill)} steps left after its fill ({fill} steps), less than its two "
                f"compiles of about {largest_compile(costs):.2f} s each{deeper_too}. The frozen prefix runs inside "
                "the compiled step; set the key to false to silence this.")

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
