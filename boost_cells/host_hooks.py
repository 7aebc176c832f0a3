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

from .user_warnings import warn_user
from .freezing.host.cache_judge import CacheJudge
from .freezing.host.decisions import LOG, DecisionLog, schedule_decisions
from .freezing.host.policy import FreezingPolicy, Observation, PolicyRecord

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

    With ``k = schedule.frozen_for_good()`` leading groups frozen (a host mirror, read from the schedule only where
    its updates may have reached a decision: ``_frozen_level``; no device read between two) it runs ``uncached[k]``
    (the step that trains from group ``k``, with the frozen prefix inside its graph) on the batch, or, caching,
    ``cached[k]`` on the cached outputs of the stages before group ``k`` (``FrozenPrefixCache``, fingerprinted by
    sample). A step compiles when it first runs, so only the levels the schedule reaches compile.

    What it decides is the policy's (``boost_cells.freezing.host.policy``: ``FreezingPolicy``, pure over one state
    record): the route times every step (``CostLedger``, from one call's start to the next, by level), and every
    ``cadence`` calls asks the policy with what it observed (``Observation``: the updates, the level, the ledger's
    costs; data-parallel, the ranks' mean, an all-reduce at the same calls on every rank, so every rank decides alike);
    it applies the answer: the levels allowed (written into the schedule's graph, ``schedule.allow``), the cache started
    or dropped, each decision logged once (``DecisionLog``) and warned where it leaves a feature out. The cache's
    measured rules (``CacheJudge``: whether samples repeat, whether they fit ``cache_max_mb``) are verdicts it hands the
    policy. Their rules need the run's steps per epoch (``fit_to_run``, the ``Run`` the train cell's ``fit_to_run``
    hands on; ``Model.train`` gives it, a loop of your own through the train cell); without it a cache switched on
    (true) keeps caching and says once that it cannot judge, and one on "auto" does not start. Data-parallel, the ranks
    share the outputs their caches compute over the epoch from the cache's first call at each level (``_exchange``,
    AllGather on the world group), so each rank's cache holds every sample after that epoch, however the sampler deals
    the samples out. The first step checks that every rank was given the same steps per epoch, at which those
    collectives fall.

    ``step_aside`` switches the whole route off (sink mode, where no host code runs between steps): the cell's own
    step (the freezing switch, with the levels it compiles without the host) then takes every step, and the
    schedule's levels are those again (``schedule.one_level``).

    Args:
        schedule (Cell): the freezing schedule.
        uncached (dict): ``{k: step}`` on the batch, for ``k = 0`` and every level the schedule reaches. Every step
            is a ``ScheduledStep`` and returns the step's outputs.
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
        policy (FreezingPolicy): what decides. state (PolicyState): its state, None before the run's first call.
        log (DecisionLog): the decisions the policy made. record (PolicyRecord): its state, for a checkpoint.
    """

    def __init__(self, schedule, uncached, ledger=None, shares=None, accumulation=1, cache=None, cached=None,
                 info=None, payback=False, judge_cache=False):
        self.schedule = schedule
        self.all_reduce = ops.AllReduce() if info is not None and info.distributed else None
        self.all_gather = ops.AllGather() if info is not None and info.distributed else None
        self.ranks = info.size if info is not None and info.distributed else 1
        self.uncached, self.cached = uncached, dict(cached or {})
        self.ledger, self.shares, self.accumulation = ledger, shares, int(accumulation)
        self.cache = cache
        self.policy = FreezingPolicy(schedule.plan.groups, payback,
                                     False if cache is None else "auto" if judge_cache else True, accumulation)
        self.state = None  # the policy's state, from the run's first call (or a step aside before it)
        self._recorded = None  # the state record last written to its Parameter
        self.record = PolicyRecord(schedule.plan.groups)
        self.log = DecisionLog()
        self.judge = CacheJudge(cache, judge_cache, self.ranks) if cache is not None else None
        self.active = True
        self.aside = None
        self.run = None  # the Run the train cell trains in (fit_to_run), None until told
        self._calls = 0  # steps taken, from the run's start
        self._unjudged_warned = False
        self._shared_level, self._share_until = 0, 0  # the level whose cache fill the ranks share, until this call
        self._level = 0  # the host mirror of the schedule's frozen level
        self._read = (0, 0)  # (calls, updates) when the schedule's updates were last read
        self._level_changes_at = 0  # the update count from which the level may differ from the mirror; None: never
        self._schedule_logged = 0  # the schedule's decisions logged so far
        self._decides_after = None  # the update count after which the route takes the next decision (first call on)

    @property
    def payback(self):
        """Whether the measured costs decide the schedule's levels (the policy's)."""
        return self.policy.payback

    @property
    def caching(self):
        """Whether the route has the cache on and not dropped (it serves, or may start)."""
        return self.cache is not None if self.state is None else self.state.caching

    @property
    def level(self):
        """The frozen level the route's last step ran at (host int, its mirror of the schedule's: no device read; 0
        before the first step)."""
        return self._level

    @property
    def required(self):
        """Whether a step means something else without the route: while it caches."""
        return self.caching

    def cells(self):
        """Every step the route may run, the ledger, the decision log and the policy's record (for the train cell's
        Cell tree: a checkpoint holds them)."""
        parts = [self.log, self.record] + ([] if self.ledger is None else [self.ledger])
        return [*self.uncached.values(), *self.cached.values(), *parts]

    def fit_to_run(self, run):
        """Take the ``Run`` the train cell trains in, whose calls per epoch the cache's rules and the policy need."""
        self.run = run

    @property
    def steps_per_epoch(self):
        """The run's calls of the train cell per epoch (int), or None before ``fit_to_run``."""
        return None if self.run is None else self.run.steps_per_epoch

    def step_aside(self, why):
        """Stop taking steps for the rest of the run (the cell's own step takes them, with the levels it compiles
        without the host), with one ``BoostConfigWarning`` that says ``why``."""
        if self.active:
            self._ask(Observation(self.schedule.applied_updates(), self._level, aside=why))
            self.active = False

    def _start(self):
        """The policy's state at the run's first call: a new run's, with a checkpoint's record where one was loaded
        (an interrupted run's decisions go on)."""
        state = self.policy.init(self.schedule.plan, self.run)
        stored = self.record.read()
        self.state = state if stored is None else state.resumed(stored)
        if self.state.cache == "dropped" and self.cache is not None:
            self.cache.clear()

    def _ask(self, observation):
        """Ask the policy about ``observation`` and apply its answer: the levels allowed written into the schedule's
        graph where they changed, the cache's rows given back where it dropped, each decision logged (and warned
        where it leaves a feature out)."""
        if self.state is None:
            self._start()
        before = self.state
        self.state, decisions = self.policy.update(before, observation)
        if self.state.allowed != before.allowed:
            self.schedule.allow([k in self.state.allowed for k in range(self.schedule.plan.groups)])
        if before.caching and not self.state.caching:
            self.cache.clear()
        for decision in decisions:
            self.log.add(decision)
            if decision.warned:
                warn_user(decision.reason)
                if decision.part != "payback":  # the cache dropped, or the route set aside
                    self.aside = decision.reason
        self.log.sync()  # what a checkpoint holds: the decisions and the state they left, written where they changed
        self._sync_record()

    def before_step(self, cell):
        """Nothing before a step."""

    def after_step(self, cell, inputs, outputs):
        """Nothing after a step."""

    def take_step(self, cell, inputs):
        """The step at the schedule's frozen level: on the cached prefix outputs while caching at a level above 0."""
        if self._calls == 0:
            if self.caching and self.all_gather is not None:
                self._check_ranks_agree(cell)
            if self.ledger is not None:
                self.ledger.load()
            self.log.load()
            if self.state is None:
                self._start()
            if self.schedule.decides:
                self._decides_after = self.schedule.decides_after(self.schedule.applied_updates())
        level = self._frozen_level()
        self._calls += 1
        if self.ledger is not None:
            self.ledger.start(level)
        if self.caching and self.judge.probing and self.steps_per_epoch is not None:
            why = self.judge.probe(self._calls - 1, self._batch(cell, inputs), self.steps_per_epoch, self._reduce,
                                   self.ledger.samples_repeat)
            if not self.judge.probing:
                self.ledger.record_repeats(self.judge.repeats)
            if why is not None:
                self._ask(Observation(self.schedule.applied_updates(), level, verdict=why))
            self.ledger.restart()  # the probe serves the cache, not the step: timed as neither
        if self.ledger is not None and (self._calls - 1) % self.cadence == 0:
            self._weigh(level)
            self.ledger.sync()  # what a checkpoint holds: every figure this weighing used
        if level == 0 or not self.state.serving:
            outputs = self.uncached[level](*inputs)
            self._decide_if_due()
            return outputs
        first = self._batch(cell, inputs)
        new_level, repeats, misses = level not in self.cache.row_bytes, self.cache.repeats, self.cache.misses
        exchange = self._exchange if self._sharing(level) else None
        prefix_outputs = self.cache(first, level, exchange)
        if self.ledger is not None:  # a step the cache served whole and alone, or neither row's
            whole = self.cache.misses == misses and exchange is None
            self.ledger.count_as(self.ledger.cached_row(level) if whole else None)
        outputs = self.cached[level](Tensor(prefix_outputs), *inputs[1:])
        self._judge(level, len(first), new_level, self.cache.repeats - repeats)
        self._decide_if_due()
        return outputs

    def _updates_bound(self):
        """The most updates the schedule can have applied by now (host int): those read last, plus one for every
        ``accumulation`` calls since, rounded up; no device read."""
        calls, updates = self._read
        return updates + -(-(self._calls - calls) // self.accumulation)

    def _decide_if_due(self):
        """After a step: where it applied the update of one of the schedule's decisions (``decides_after``), take
        that decision (the schedule's ``decide_now``, op by op: no graph to compile), as the step's own graph would
        have, and record its seconds in the ledger (``Costs.decision``); the level is read again at the next call.
        The schedule's updates are read only once the updates applied may have reached it.

        While payback allows no level deeper than the one frozen, a decision could freeze nothing, and the route
        skips it: a run where no level pays takes none. What skipping gives up is on the safe side: the next decision
        measures its segments' displacement against the copies of the last decision taken, over more updates than an
        interval but counted per interval (a larger displacement), and its loss mean spans the intervals since; so a
        front freezes no earlier for it, and at the latest two decisions after payback allows a deeper level."""
        if not self.schedule.decides:
            return
        if self._updates_bound() < self._decides_after:
            return
        updates = self.schedule.applied_updates()
        self._read = (self._calls, updates)
        if updates < self._decides_after:
            return
        if updates == self._decides_after and max(self.state.allowed) > self._level:
            started = None if self.ledger is None else self.ledger.clock()
            self.schedule.decide_now()
            if started is not None:
                self.ledger.record_decision(self.ledger.clock() - started)
            self._level_changes_at = updates  # the decision may have frozen more: read the level next call
        self._decides_after = self.schedule.decides_after(updates)

    def _frozen_level(self):
        """The schedule's frozen level before this call, from its host mirror: the schedule's Parameters are read
        (its updates, then its level) only once the updates applied may have reached the next update count at which
        the level can change (``level_changes_at``; at most one call in ``accumulation`` early), so a step between
        two of the schedule's decisions reads nothing on the device. The first call reads them (a resumed run)."""
        if self._level_changes_at is None:
            return self._level
        if self._updates_bound() < self._level_changes_at and self._calls > 0:
            return self._level
        updates = self.schedule.applied_updates()
        self._read = (self._calls, updates)
        if updates >= self._level_changes_at:
            level = self.schedule.frozen_for_good()
            if level != self._level:
                self._log_schedule()
            self._level = level
            self._level_changes_at = self.schedule.level_changes_at(updates)
        return self._level

    def _sync_record(self):
        """Write the policy's state record to its Parameter, where it changed since the last write."""
        record = self.state.to_dict()
        if record != self._recorded:
            self.record.write(record)
            self._recorded = record

    def _log_schedule(self):
        """Log the schedule's decisions made since the last that was logged (rendered from its Parameters)."""
        decisions = schedule_decisions(self.schedule)
        for decision in decisions[self._schedule_logged:]:
            LOG.info(decision.line())
        self._schedule_logged = len(decisions)

    def _check_ranks_agree(self, cell):
        """Data-parallel, before the first step: every rank was given the same steps per epoch (one AllGather). The
        cache's collectives (the probe's and the judge's counts, the shared fill) fall at calls counted in epochs, so
        ranks given different ones would call them at different steps and wait on each other, or pair the wrong
        arrays; every rank gathers the same numbers, so every rank raises alike.

        Raises:
            ValueError: the ranks' steps per epoch differ (or some were given them and some not).
        """
        given = -1 if self.steps_per_epoch is None else self.steps_per_epoch
        ranks = self.all_gather(Tensor(np.array([given], np.int32))).asnumpy().tolist()
        if len(set(ranks)) > 1:
            got = ", ".join("not given" if steps < 0 else str(steps) for steps in ranks)
            raise ValueError(f"For '{type(cell).__name__}', 'steps_per_epoch' (fit_to_run) must be the same on every "
                             "rank with 'grad_freeze.cache_frozen_prefix' on data-parallel (the cache's collectives "
                             f"fall at steps counted in epochs), but the ranks got {got}, in rank order. Give each "
                             "rank the same number of batches an epoch (DistributedSampler does), or set the key to "
                             "false.")

    def _sharing(self, level):
        """Whether this call shares the outputs the cache computes with the other ranks: data-parallel, over the
        epoch of calls from the first call the cache serves at each level (the same calls on every rank, as the level
        and the cache's start are decided alike), after which every rank's cache holds every sample."""
        if self.all_gather is None or self.steps_per_epoch is None:
            return False
        if level != self._shared_level:
            self._shared_level, self._share_until = level, self._calls + self.steps_per_epoch - 1
        return self._calls <= self._share_until

    def _exchange(self, digests, rows):
        """Every rank's ``digests`` (uint8 (m_r, 16)) and ``rows`` (m_r, ...), concatenated in rank order: the
        counts are gathered first, then both arrays, padded to the largest count (the world group's AllGather)."""
        counts = self.all_gather(Tensor(np.array([len(rows)], np.int32))).asnumpy()
        most = int(counts.max())
        if most == 0:
            return digests, rows
        pad = most - len(rows)
        words = np.pad(digests, ((0, pad), (0, 0))).view(np.int32)
        rows = np.concatenate([rows, np.zeros((pad, *rows.shape[1:]), rows.dtype)])
        keep = np.concatenate([np.arange(rank * most, rank * most + count) for rank, count in enumerate(counts)])
        gathered_words = self.all_gather(Tensor(words)).asnumpy()
        gathered_rows = self.all_gather(Tensor(rows)).asnumpy()
        return np.ascontiguousarray(gathered_words[keep]).view(np.uint8), gathered_rows[keep]

    @staticmethod
    def _batch(cell, inputs):
        """The call's first input, the batch, as numpy (n, ...)."""
        if not inputs:
            raise TypeError(f"For '{type(cell).__name__}', the frozen-prefix cache needs the batch as the first input, "
                            "but the cell was called without inputs.")
        return inputs[0].asnumpy() if isinstance(inputs[0], Tensor) else np.asarray(inputs[0])

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
        """Ask the policy with the ledger's costs (data-parallel, every rank's mean), where it weighs anything: the
        levels (payback), or the cache while it is undecided."""
        if not self.policy.weighs(self.state, level):
            return
        decision_every = self.schedule.interval * self.accumulation if self.schedule.decides else 0
        costs = self.ledger.costs(self._summary(), self.shares, decision_every)
        repeats = None if self.judge is None else self.judge.repeats
        self._ask(Observation(self.schedule.applied_updates(), level, costs, repeats))

    def _judge(self, level, rows, new_level, repeated):
        """Drop the cache where it cannot pay (see the class docstring)."""
        if self.steps_per_epoch is None:
            if not self._unjudged_warned:
                self._unjudged_warned = True
                warn_user("The frozen-prefix cache ('grad_freeze.cache_frozen_prefix') cannot judge whether it pays "
                          "(whether samples repeat, whether they fit 'grad_freeze.cache_max_mb') without the run's "
                          "steps per epoch: it caches on. Give it with the train cell's "
                          "fit_to_run(boost_cells.Run(epochs, steps_per_epoch)) before training (Model.train does).")
            return
        why = self.judge.after_step(self._calls - 1, level, rows, new_level, repeated, self.steps_per_epoch,
                                    self._reduce)
        if why is not None:
            self._ask(Observation(self.schedule.applied_updates(), level, verdict=why))

    def _reduce(self, counts):
        """``counts`` (numbers) summed over the ranks, as a numpy array."""
        counts = np.array(counts, np.float32)
        return counts if self.all_reduce is None else self.all_reduce(Tensor(counts)).asnumpy()
