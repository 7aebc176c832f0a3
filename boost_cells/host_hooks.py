"""Host-side step features in one place: hooks that run on the host around each call of a train cell.

A feature that needs the host between steps is a hook listed in the cell's ``host_hooks``; ``HostHooks.__call__``
runs the active ones around each call. The hook protocol:

- ``active`` (bool): whether the hook runs; a hook may step aside for the rest of the run (the frozen-prefix cache,
  where it does not pay).
- ``required`` (bool): whether a step means something else without the hook (the first-overflow report, the cache);
  a cell with a required hook active refuses to compile nested. One that only chooses among steps that mean the
  same (the frozen levels' route without the cache) lets the cell's own step run there.
- ``before_step(cell)`` and ``after_step(cell, inputs, outputs)``: around the step (the first-overflow report,
  ``diagnostics.FirstOverflowReporter``, reads the scale before and locates the overflow after).
- ``take_step(cell, inputs)``: the step's outputs, taken by the hook (the frozen-prefix cache's route runs the step
  on the cached prefix outputs), or None to leave the step to the cell's own ``construct``.

Such a call exists only when Python calls the cell. Nested in another Cell's graph (dataset sink mode's
``_DataWrapper`` calls the train cell from its ``construct``), the cell's ``construct`` is compiled into the outer
graph and no hook could run, so compiling it there with an active hook raises instead of silently dropping the
feature (``Model.train`` steps the cache aside in sink mode, with a warning, before it compiles).
"""
import numpy as np
from mindspore import Tensor, ops

from .config import warn_user
from .freezing.payback import cache_pays, cache_saving, compile_estimate, expected_saving, paying_levels

__all__ = ["FrozenLevelRoute", "HostHooks"]


class HostHooks:
    """Mixin for a train Cell: runs the active ``host_hooks`` around each call, and refuses to compile nested while
    it has any.

    The cell's ``construct`` starts with ``if not self.host_hooks_ready: raise RuntimeError(self.host_hooks_refusal)``.
    MindSpore reads both properties while compiling ``construct`` (PyNative: on every call); the condition is a
    constant, so the compile fails with that error exactly when the cell has active host hooks but is being compiled
    outside its own ``__call__``, i.e. nested in another Cell's graph. With no active hook, ``__call__`` is the plain
    ``Cell.__call__``.
    """

    host_hooks = ()

    @property
    def active_hooks(self):
        """The host hooks that run around each call."""
        return [hook for hook in self.host_hooks if hook.active]

    def __call__(self, *inputs):
        hooks = self.active_hooks
        if not hooks:
            return super().__call__(*inputs)
        for hook in hooks:
            hook.before_step(self)
        outputs = None
        for hook in hooks:
            outputs = hook.take_step(self, inputs)
            if outputs is not None:
                break
        if outputs is None:
            object.__setattr__(self, "_host_call", True)
            try:
                outputs = super().__call__(*inputs)
            finally:
                object.__setattr__(self, "_host_call", False)
        for hook in hooks:
            hook.after_step(self, inputs, outputs)
        return outputs

    @property
    def host_hooks_ready(self):
        """Whether the cell may compile its ``construct`` here: no active hook it requires (one without which a step
        would mean something else), or compiled (run, in PyNative) inside the cell's own call. False when the cell
        is compiled inside another Cell's graph with a required hook active."""
        return not any(hook.required for hook in self.active_hooks) or self.__dict__.get("_host_call", False)

    @property
    def host_hooks_refusal(self):
        """The error message for a cell with active host hooks compiled where they cannot run."""
        names = ", ".join(type(hook).__name__ for hook in self.active_hooks)
        return (f"For '{type(self).__name__}', the host-side feature(s) {names} need the host around every step, "
                "but the cell is being compiled inside another Cell's graph (nested, or dataset sink mode), where no "
                "host code runs between steps. Call the train cell directly, use dataset_sink_mode=False, or switch "
                "the feature off.")


class FrozenLevelRoute:
    """The frozen levels' steps, taken on the host: each compiles when first taken, the run's measured costs decide
    which levels pay (``grad_freeze.payback``), and with the frozen-prefix cache the frozen prefix's outputs are
    cached. While active it takes every step.

    With ``k = schedule.frozen_for_good()`` leading groups frozen (one scalar read a step) it runs ``uncached[k]``
    (the step that trains from group ``k``, with the frozen prefix inside its graph) on the batch, or, caching,
    ``cached[k]`` on the cached outputs of the stages before group ``k`` (``FrozenPrefixCache``, fingerprinted by
    sample). A step compiles when it first runs, so only the levels the schedule reaches compile.

    Payback (``payback``; the automatic schedule): the ledger (``CostLedger``) times every step, from one call's
    start to the next, by level; every ``cadence`` calls the route weighs which levels pay for their compile in the
    steps left (``boost_cells.freezing.payback.paying_levels``) and lets the schedule freeze to those alone
    (``schedule.allow``). Where none pays before the front is due to freeze, the run trains every group, as O0
    does, and one warning says so with the measured figures. Data-parallel, the ranks' ledgers are averaged first (an
    all-reduce at the same calls on every rank), so every rank allows the same levels.

    The cache judges itself on the run at hand and drops itself (``drop_cache``) where it cannot pay, with one
    warning that says why; the route goes on with ``uncached[k]``. Its rules need the run's steps per epoch
    (``fit_run``; ``Model.train`` gives it, a loop of your own through the train cell's ``fit_to_run``); without it
    a cache switched on (true) keeps caching and says once that it cannot judge, and one on "auto" does not start.

    With ``judge_cache`` (``cache_frozen_prefix`` "auto") it first weighs its own payback, at the same calls as the
    levels (``boost_cells.freezing.payback.cache_pays``):

    - At a newly frozen level, the steps run on the batch until the ledger knows that level's step; the cache then
      starts filling only where the steps left after an epoch's fill, times the saving expected, repay its two
      compiles.
    - Once it served a few steps whole (every sample a hit), the A/B: it stays only where those steps measure faster
      than the level's steps on the batch (at a level the cache reached directly, that step as ``expected_saving``
      gives it). One way only: a step on the batch after caching would run the frozen prefix in training mode and
      change its BatchNorm statistics, which drops what was cached.

    - Samples do not repeat (augmentation): an epoch after its first cached step, over an eighth of an epoch
      (``_RepeatWindow``), fewer than ``REPEAT_SHARE`` of the share of looked-up samples it had seen before that
      samples repeating every epoch would give (``FrozenPrefixCache.repeats``). Data-parallel, the ranks' counts are
      summed, so every rank decides alike, and the bar is divided by the rank count: a sampler that deals the
      samples out anew every epoch brings a rank each sample about once in that many epochs.
    - The data cannot fit ``cache_max_mb``: at a level's first outputs, an epoch's samples times the bytes of one
      sample's output exceed the cache's memory, so the cache would fill and then compute most samples anyway.

    ``step_aside`` switches the whole route off (sink mode, where no host code runs between steps): the cell's own
    step (the freezing switch, with the levels it compiles without the host) then takes every step, and the
    schedule's levels are those again (``schedule.one_level``).

    Args:
        schedule (Cell): the freezing schedule.
        uncached (dict): ``{k: step}`` on the batch, for ``k = 0`` and every level the schedule reaches. Every step
            is a ``ScheduledStep`` and returns ``(outputs, applied)``.
        ledger (CostLedger): the run's measured costs, or None (neither payback nor a judged cache).
        shares (tuple of float): with the ledger, each level's share of the network's layers (``layer_shares``).
        payback (bool): the measured costs decide the schedule's levels; False: it keeps the levels it has.
        accumulation (int): micro-steps (calls) per optimizer update.
        cache (FrozenPrefixCache): the cache, or None. cached (dict): ``{k: step}`` on the cached outputs, for every
            ``k >= 1`` the schedule reaches (with the cache).
        info (ParallelInfo): the data-parallel setting; default None: stand-alone.
        judge_cache (bool): the cache weighs its own payback before and after it fills (with the ledger).

    Attributes:
        active (bool): whether it takes the steps. caching (bool): whether it uses the cache. aside (str): why it
            dropped the cache or stepped aside, or None. required (bool): whether a step means something else
            without it (caching: the cached prefix runs in inference mode), so the cell refuses to compile nested.
    """

    REPEAT_SHARE = 0.5  # the least share of repeated samples at which caching pays

    def __init__(self, schedule, uncached, ledger=None, shares=None, accumulation=1, cache=None, cached=None,
                 info=None, payback=False, judge_cache=False):
        self.schedule = schedule
        self.all_reduce = ops.AllReduce() if info is not None and info.distributed else None
        self.ranks = info.size if info is not None and info.distributed else 1
        self.uncached, self.cached = uncached, dict(cached or {})
        self.ledger, self.shares, self.accumulation = ledger, shares, int(accumulation)
        self.payback, self.judge_cache = bool(payback), bool(judge_cache) and cache is not None
        self.cache = cache
        self.active, self.caching = True, cache is not None
        self.cache_started = not self.judge_cache  # judged: once its payback is weighed at a frozen level
        self._cache_compared = False  # judged: the A/B of cached steps against steps on the batch is done
        self.aside = None
        self.steps_per_epoch = None
        self._calls = 0  # steps taken, from the run's start
        self._window = None  # the _RepeatWindow, from the first cached step on
        self._unjudged_warned = self._unpaid_warned = False
        self._allowed = None  # the levels last allowed (host tuple)

    @property
    def required(self):
        """Whether a step means something else without the route: while it caches."""
        return self.caching

    def cells(self):
        """Every step the route may run, and the ledger (for the train cell's Cell tree)."""
        return [*self.uncached.values(), *self.cached.values()] + ([self.ledger] if self.ledger is not None else [])

    def fit_run(self, steps_per_epoch):
        """The run's steps (train-cell calls) per epoch, which the cache's rules need."""
        self.steps_per_epoch = int(steps_per_epoch)

    def drop_cache(self, why):
        """Stop caching for the rest of the run (the cached outputs are dropped, their memory given back) and take
        the steps on the batch, with one ``BoostConfigWarning`` that says ``why`` (naming the key), attributed to
        the user's line."""
        if self.caching:
            self.caching, self.aside = False, why
            self.cache.clear()
            warn_user(why)

    def step_aside(self, why):
        """Stop taking steps for the rest of the run (the cell's own step takes them, with the levels it compiles
        without the host), with one ``BoostConfigWarning`` that says ``why``."""
        if self.active:
            if self.caching:
                self.drop_cache(why)
            else:
                self.aside = why
                warn_user(why)
            if self.payback:
                self.schedule.allow(self.schedule.one_level())
            self.active = False

    def before_step(self, cell):
        """Nothing before a step."""

    def after_step(self, cell, inputs, outputs):
        """Nothing after a step."""

    def take_step(self, cell, inputs):
        """The step at the schedule's frozen level: on the cached prefix outputs while caching at a level above 0."""
        self._calls += 1
        level = self.schedule.frozen_for_good()
        if self.ledger is not None:
            self.ledger.start(level)
            if (self._calls - 1) % self.cadence == 0:
                self._weigh(level)
        if level == 0 or not (self.caching and self.cache_started):
            return self.uncached[level](*inputs)[0]
        if not inputs:
            raise TypeError(f"For '{type(cell).__name__}', the frozen-prefix cache needs the batch as the first input, "
                            "but the cell was called without inputs.")
        first = inputs[0].asnumpy() if isinstance(inputs[0], Tensor) else np.asarray(inputs[0])
        new_level, repeats, misses = level not in self.cache.row_bytes, self.cache.repeats, self.cache.misses
        prefix_outputs = self.cache(first, level)
        if self.ledger is not None:  # a step the cache served whole, or neither row's
            self.ledger.count_as(self.ledger.cached_row(level) if self.cache.misses == misses else None)
        outputs = self.cached[level](Tensor(prefix_outputs), *inputs[1:])[0]
        self._judge(level, len(first), new_level, self.cache.repeats - repeats)
        return outputs

    @property
    def cadence(self):
        """Calls between two weighings: half the schedule's decision interval (in calls), so the levels allowed are
        fresh at every decision."""
        return max(1, self.schedule.plan.criterion.interval * self.accumulation // 2)

    def _summary(self):
        """The ledger's summary; data-parallel, the mean over the ranks of each figure every rank knows (-1 where
        one does not), so every rank decides alike."""
        summary = self.ledger.summary()
        if self.all_reduce is None:
            return summary
        known = summary >= 0
        total = self.all_reduce(Tensor(np.stack([np.where(known, summary, 0), known]).astype(np.float32))).asnumpy()
        return np.where(total[1] == self.ranks, total[0] / self.ranks, -1.0).astype(np.float32)

    def _weigh(self, level):
        """Allow the schedule the levels that pay in the steps left, and weigh the cache's payback while it is
        undecided (see the class docstring)."""
        judging = self.judge_cache and self.caching and level > 0 and not self._cache_compared
        if not (self.payback or judging):
            return
        updates = self.schedule.applied_updates()
        steps_left = max(0, self.schedule.plan.total_steps - updates) * self.accumulation
        costs = self.ledger.costs(self._summary(), self.shares)
        if self.payback:
            self._allow(costs, level, steps_left, updates)
        if judging:
            self._judge_payback(costs, level, steps_left)

    def _allow(self, costs, level, steps_left, updates):
        """Allow the schedule the levels that pay in the steps left; warn once where none does."""
        plan, levels = self.schedule.plan, len(self.shares)
        paying = paying_levels(costs, level, steps_left)
        allowed = tuple(k for k in range(levels) if k <= level or k in paying)
        if allowed != self._allowed:
            self.schedule.allow([k in allowed for k in range(levels)])
            self._allowed = allowed
        if paying or level > 0 or self._unpaid_warned or 0 not in costs.step or not costs.compile:
            return
        if updates + plan.criterion.interval >= plan.first_frozen_update:
            self._unpaid_warned = True
            warn_user(f"Gradient freezing does not pay in this run ('grad_freeze.payback'): at update {updates} of "
                      f"{plan.total_steps}, a step costs {costs.step[0] * 1e3:.1f} ms and a frozen level's compile "
                      f"about {compile_estimate(costs, level + 1):.2f} s, so no level's saving over the {steps_left} "
                      "steps left repays its compile. The run trains every group, as O0 does, while that holds; set "
                      "'grad_freeze.payback' to false to freeze regardless.")

    def _judge_payback(self, costs, level, steps_left):
        """Start filling the cache where it pays, then keep it only where its whole steps beat the level's steps on
        the batch (see the class docstring)."""
        key = "'grad_freeze.cache_frozen_prefix' \"auto\""
        if not self.cache_started:
            if level not in costs.step:  # the level's steps on the batch are still being timed
                return
            if self.steps_per_epoch is None:
                self.drop_cache(f"The frozen-prefix cache ({key}) does not start: it cannot weigh whether it pays "
                                "without the run's steps per epoch (an epoch passes before a sample repeats). Give them "
                                "with the train cell's fit_to_run(total_steps, steps_per_epoch) before training "
                                "(Model.train does), or set the key to true to cache regardless.")
            elif cache_pays(costs, level, steps_left, self.steps_per_epoch):
                self.cache_started = True
            else:
                self.drop_cache(
                    f"The frozen-prefix cache ({key}) does not start, as it would not pay in this run: at frozen level "
                    f"{level} a step takes {costs.step[level] * 1e3:.1f} ms, of which the cache would save about "
                    f"{cache_saving(costs, level) * 1e3:.1f} ms (the frozen prefix's forward pass) over the "
                    f"{max(0, steps_left - self.steps_per_epoch)} steps left after an epoch's fill, less than its two "
                    f"compiles of about {max(costs.compile.values()):.2f} s each. The frozen prefix runs inside the "
                    "compiled step; set the key to false to silence this.")
            return
        if level not in costs.cached_step:
            return
        self._cache_compared = True
        on_batch = costs.step.get(level, costs.step[0] - expected_saving(costs, level))
        if costs.cached_step[level] >= on_batch:
            self.drop_cache(f"The frozen-prefix cache ({key}) steps aside, as it does not pay on this machine: at "
                            f"frozen level {level} a step it served whole took {costs.cached_step[level] * 1e3:.1f} ms, "
                            f"where a step on the batch takes {on_batch * 1e3:.1f} ms. The frozen prefix now runs "
                            "inside the compiled step; set the key to false to silence this.")

    def _judge(self, level, rows, new_level, repeated):
        """Drop the cache where it cannot pay (see the class docstring)."""
        if self.steps_per_epoch is None:
            if not self._unjudged_warned:
                self._unjudged_warned = True
                warn_user("The frozen-prefix cache ('grad_freeze.cache_frozen_prefix') cannot judge whether it pays "
                          "(whether samples repeat, whether they fit 'grad_freeze.cache_max_mb') without the run's "
                          "steps per epoch: it caches on. Give it with the train cell's fit_to_run(total_steps, "
                          "steps_per_epoch) before training (Model.train does).")
            return
        epoch = self.steps_per_epoch
        samples = epoch * rows
        needed = samples * self.cache.row_bytes.get(level, 0)
        if new_level and needed > self.cache.max_bytes:
            self.drop_cache(f"The frozen-prefix cache steps aside: an epoch's {samples} samples need about "
                            f"{needed / 2 ** 20:.0f} MB at frozen level {level}, more than 'grad_freeze.cache_max_mb' "
                            f"({self.cache.max_bytes / 2 ** 20:.0f} MB), so it would fill and then compute most samples "
                            "anyway. The frozen prefix now runs inside the compiled step; raise the key to cache.")
            return
        if self._window is None:
            self._window = _RepeatWindow(self._calls - 1, epoch)
        counts = self._window.counts(self._calls - 1, rows, repeated)
        if counts is None:
            return
        if self.all_reduce is not None:  # every rank decides alike (a dropped cache runs the prefix in training mode)
            counts = tuple(self.all_reduce(Tensor(np.array(counts, np.float32))).asnumpy())
        share, bar = counts[1] / max(1.0, counts[0]), self.REPEAT_SHARE * self._window.expected / self.ranks
        if share < bar:
            self.drop_cache(f"The frozen-prefix cache steps aside: after an epoch of caching, only {share:.0%} of the "
                            "samples it looked up had been seen before, where samples that repeat every epoch would "
                            f"give about {self._window.expected / self.ranks:.0%} (augmentation changes them every "
                            "epoch), so fingerprinting and storing them costs more than it saves. The frozen prefix "
                            "now runs inside the compiled step; set 'grad_freeze.cache_frozen_prefix' to false to "
                            "silence this.")


class _RepeatWindow:
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
