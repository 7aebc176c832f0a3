"""The frozen levels' policy on the host: which levels the schedule may freeze to (payback) and what the frozen-prefix
cache does (wait, fill, keep, drop), decided from the run's measured costs. One shape, as an optax transformation:

    state = policy.init(plan, run)
    state, decisions = policy.update(state, observation)

``update`` is pure: from the state record (``PolicyState``) and what the route observed (``Observation``: the
updates applied, the frozen level, the ledger's costs, the cache's measured verdicts) it returns the next state and
the decisions that changed anything (``Decision``: what, why, from which figures). The route applies them: it
writes the allowed levels into the schedule's graph, starts or drops the cache, logs each decision, and warns where
one leaves out a feature the config switched on (``Decision.warned``). A checkpoint holds the state record as JSON
(``PolicyRecord``), so a resumed run goes on from what the interrupted one decided.

The rules (``payback``): a level is allowed where the steps left repay its compile (by ``ENTRY_MARGIN`` more where
the last weighing did not allow it); the cache fills at a frozen level where the steps left after its fill repay its
two compiles, waits for a deeper allowed level while a fill there can still pay (its deadline), and after its fill
stays only where its whole steps beat the level's steps on the batch (the A/B). Its measured rules (memory, whether
samples repeat: ``cache_judge``) are verdicts the route observes; a verdict drops it.

Where no host runs between steps (sink mode, a nested graph) there is no policy: the route steps aside
(``Observation.aside``) and the schedule's in-graph decision freezes by the same settled rule, the whole front at once.
"""
import dataclasses

from .decisions import Decision, Figure, JsonParameter
from .payback import (Costs, cache_pays, cache_saving, cache_saving_source, compile_estimate, compile_source,
                      decision_estimate, decision_source, entry_bar, expected_saving, largest_compile, paying_levels,
                      saving_source)

__all__ = ["CACHE_PHASES", "FreezingPolicy", "Observation", "PolicyRecord", "PolicyState"]

CACHE_PHASES = ("off", "on", "undecided", "waiting", "filling", "kept", "dropped")
_SERVING = ("on", "filling", "kept")  # the phases in which the cache serves the frozen steps
_AUTO = "'grad_freeze.cache_frozen_prefix' \"auto\""


@dataclasses.dataclass(frozen=True)
class PolicyState:
    """The policy's state record: plain data, held by a checkpoint (``PolicyRecord``).

    Attributes:
        level (int): the frozen level last observed.
        allowed (tuple of int): the levels the schedule may freeze to (written into its graph by the route).
        paying (tuple of int): the levels above ``level`` the last payback decision said pay.
        cache (str): the frozen-prefix cache's phase (``CACHE_PHASES``): "off" (no cache), "on" (true: it serves
            from a level's first step, judged by its measured rules alone), "undecided" ("auto": weighed at each
            weighing), "waiting" (it does not pay at the level reached and waits for a deeper one), "filling" (it
            serves; its A/B is pending), "kept" (its A/B passed), "dropped".
        waited (tuple of int): the levels at which a wait was recorded.
        unpaid_said (bool): the decision that no level pays was made (and warned).
        costs (Costs): the costs last weighed, or None.
        total_steps (int): the run's updates (the plan's). steps_per_epoch (int): calls per epoch (the run's), or
            None where not given. unpaid_from (int): the update from which "no level pays" is said: an interval
            before the schedule's first decision (the plan's).
    """

    level: int = 0
    allowed: tuple = ()
    paying: tuple = ()
    cache: str = "off"
    waited: tuple = ()
    unpaid_said: bool = False
    costs: Costs = None
    total_steps: int = 0
    steps_per_epoch: int = None
    unpaid_from: int = 0

    @property
    def serving(self):
        """Whether the cache serves the frozen steps."""
        return self.cache in _SERVING

    @property
    def caching(self):
        """Whether the cache is on and not dropped (it serves, or may start)."""
        return self.cache not in ("off", "dropped")

    def to_dict(self):
        """What a checkpoint holds: the decided fields (the run's figures come from the resumed run's ``init``)."""
        costs = None if self.costs is None else {
            "step": _keyed(self.costs.step), "compile": _keyed(self.costs.compile),
            "shares": list(self.costs.shares), "cached_step": _keyed(self.costs.cached_step),
            "decision": self.costs.decision, "decision_every": self.costs.decision_every}
        return {"level": self.level, "allowed": list(self.allowed), "paying": list(self.paying), "cache": self.cache,
                "waited": list(self.waited), "unpaid_said": self.unpaid_said, "costs": costs}

    def resumed(self, data):
        """This state (a new run's ``init``) with the decided fields of ``data`` (``to_dict``'s, a checkpoint's). The
        cache's rows are not checkpointed, so a cache that served is weighed again (its fill costs anew); a dropped
        one stays dropped and a wait stays recorded."""
        cache = data["cache"]
        if self.cache == "off" or cache in ("off", "on"):
            cache = self.cache
        elif cache in ("filling", "kept"):
            cache = "undecided"
        costs = data["costs"]
        if costs is not None:
            costs = Costs(step=_unkeyed(costs["step"]), compile=_unkeyed(costs["compile"]),
                          shares=tuple(costs["shares"]), cached_step=_unkeyed(costs["cached_step"]),
                          decision=costs.get("decision"), decision_every=costs.get("decision_every", 0))
        return dataclasses.replace(self, level=data["level"], allowed=tuple(data["allowed"]),
                                   paying=tuple(data["paying"]), cache=cache, waited=tuple(data["waited"]),
                                   unpaid_said=data["unpaid_said"], costs=costs)


def _keyed(table):
    return {str(level): value for level, value in table.items()}


def _unkeyed(table):
    return {int(level): value for level, value in table.items()}


@dataclasses.dataclass(frozen=True)
class Observation:
    """What the route observed when it asks the policy.

    Attributes:
        updates (int): the optimizer updates applied. level (int): the frozen level.
        costs (Costs): the ledger's costs (data-parallel, the ranks' mean), at a weighing; None otherwise.
        repeats (bool): whether the samples repeat from epoch to epoch, as the cache's probe measured; None before.
        verdict (str): why the cache cannot pay, as one of its measured rules found (memory, repeats); None.
        aside (str): why the route steps aside for the rest of the run (no host between steps); None.
    """

    updates: int
    level: int
    costs: Costs = None
    repeats: bool = None
    verdict: str = None
    aside: str = None


class FreezingPolicy:
    """The frozen levels' policy (see the module docstring).

    Args:
        levels (int): the levels, ``0 .. levels - 1`` (the schedule's groups).
        payback (bool): the measured costs decide the levels allowed (``grad_freeze.payback``); False: the
            schedule keeps the levels it has.
        cache (bool or str): ``grad_freeze.cache_frozen_prefix`` where the route has the cache: True (it serves
            without weighing its payback) or "auto" (it weighs it); False: no cache.
        accumulation (int): calls per optimizer update.
    """

    def __init__(self, levels, payback, cache, accumulation=1):
        self.levels, self.payback, self.cache = int(levels), bool(payback), cache
        self.accumulation = int(accumulation)

    def init(self, plan, run=None):
        """The state at a run's start: the schedule's own levels allowed (the whole front's), the cache's first
        phase; the run's updates from ``plan`` (a ``FreezePlan``, fitted to the run), its calls per epoch from
        ``run`` (a ``boost_cells.Run``; None: not given)."""
        cache = "off" if not self.cache else "undecided" if self.cache == "auto" else "on"
        return PolicyState(allowed=(self.levels - 1,), cache=cache, total_steps=plan.total_steps,
                           steps_per_epoch=None if run is None else run.steps_per_epoch,
                           unpaid_from=(plan.first_frozen_update - plan.criterion.interval
                                        if plan.criterion is not None and plan.freezes else 0))

    def update(self, state, observation):
        """``(next state, decisions)`` for ``observation``: a step aside, a cache verdict, or a weighing of the levels
        and the cache on the observed costs (a tuple of ``Decision``, () where nothing changed)."""
        state = dataclasses.replace(state, level=observation.level)
        if observation.aside is not None:
            return self._step_aside(state, observation)
        if observation.verdict is not None:
            return self._drop(state, observation, observation.verdict)
        if observation.costs is None:
            return state, ()
        state = dataclasses.replace(state, costs=observation.costs)
        steps_left = max(0, state.total_steps - observation.updates) * self.accumulation
        decisions = ()
        if self.payback:
            state, decisions = self._allow(state, observation, steps_left)
        if self._weighs_cache(state, observation.level):
            state, cached = self._weigh_cache(state, observation, steps_left)
            decisions += cached
        return state, decisions

    def weighs(self, state, level):
        """Whether an observation of the costs at frozen level ``level`` has anything to decide: the levels
        (payback), or the cache while it is undecided ("auto"). The route measures the costs (data-parallel, a
        collective on every rank alike) only where this holds."""
        return self.payback or self._weighs_cache(state, level)

    def _weighs_cache(self, state, level):
        return self.cache == "auto" and state.cache in ("undecided", "waiting", "filling") and level > 0

    def _decision(self, state, observation, part, action, reason, figures=(), warned=False):
        return Decision(observation.updates, part, action, reason, tuple(figures), state.total_steps, warned)

    def _step_aside(self, state, observation):
        """No host between steps from here: the schedule's own levels, the cache dropped; one warning."""
        decisions = ()
        if state.caching:
            state, decisions = self._drop(state, observation, observation.aside)
        aside = self._decision(state, observation, "route", "stepped aside", observation.aside,
                               warned=not decisions)
        return dataclasses.replace(state, allowed=(self.levels - 1,)), decisions + (aside,)

    def _drop(self, state, observation, why):
        """The cache dropped for the rest of the run, saying ``why`` (a warning)."""
        if not state.caching:
            return state, ()
        return (dataclasses.replace(state, cache="dropped"),
                (self._decision(state, observation, "cache", "cache: drop", why, warned=True),))

    def _allow(self, state, observation, steps_left):
        """The levels that pay in the steps left allowed; a record where they changed, and one (warned) where none
        pays before the front is due to freeze."""
        costs, level, updates = observation.costs, observation.level, observation.updates
        paying = paying_levels(costs, level, steps_left, state.paying)
        allowed = tuple(k for k in range(self.levels) if k <= level or k in paying)
        decisions = ()
        if paying != tuple(k for k in state.paying if k > level):  # not merely a level reached since
            decisions += (self._paying_decision(state, observation, steps_left, paying),)
        state = dataclasses.replace(state, allowed=allowed, paying=paying)
        if paying or level > 0 or state.unpaid_said or 0 not in costs.step or not costs.compile:
            return state, decisions
        if updates < state.unpaid_from:
            return state, decisions
        decision = decision_estimate(costs, steps_left)
        decision_text = f" and the decisions' host work about {decision:.2f} s" if decision else ""
        why = (f"Gradient freezing does not pay in this run ('grad_freeze.payback'): at update {updates} of "
               f"{state.total_steps}, a step costs {costs.step[0] * 1e3:.1f} ms and a frozen level's compile "
               f"about {compile_estimate(costs, level + 1):.2f} s{decision_text}, so no level's saving over the "
               f"{steps_left} steps left repays {_bar(level + 1, state.paying, decision=decision)}. The run trains "
               "every group, as O0 does, while that holds; set 'grad_freeze.payback' to false to freeze regardless.")
        unpaid = self._decision(state, observation, "payback", "no level pays", why,
                                self._payback_figures(costs, level, level + 1, steps_left), warned=True)
        return dataclasses.replace(state, unpaid_said=True), decisions + (unpaid,)

    def _paying_decision(self, state, observation, steps_left, paying):
        """The record that the levels that pay changed (``paying``, above the level), with the deepest one's
        figures."""
        costs, level = observation.costs, observation.level
        decisions = decision_estimate(costs, steps_left)
        if paying:
            deepest = max(paying)
            gain = steps_left * (expected_saving(costs, deepest) - expected_saving(costs, level))
            action = f"allowed level{'s' if len(paying) > 1 else ''} {', '.join(map(str, paying))}"
            reason = (f"level {deepest} pays: {steps_left} steps left x its saving a step = {gain:.2f} s > "
                      f"{_bar(deepest, state.paying, compile_estimate(costs, deepest), decisions)}")
        else:
            action, deepest = "allowed no deeper level", level + 1
            held = "its compile (a level allowed before) or " if any(k > level for k in state.paying) else ""
            reason = (f"no level above {level} repays {held}{_bar(deepest, (), decision=decisions)} in the "
                      f"{steps_left} steps left")
        return self._decision(state, observation, "payback", action, reason,
                              self._payback_figures(costs, level, deepest, steps_left))

    @staticmethod
    def _payback_figures(costs, level, deeper, steps_left):
        """The figures payback weighs ``deeper`` by, from ``level``: the full step, the saving, the compile."""
        figures = [Figure("full step", costs.step[0] * 1e3, "ms"),
                   Figure("steps left", steps_left, "steps", "the run's length")]
        saving = expected_saving(costs, deeper) - expected_saving(costs, level)
        figures.append(Figure(f"level {deeper}'s saving a step", saving * 1e3, "ms", saving_source(costs, deeper)))
        compile_seconds = compile_estimate(costs, deeper)
        if compile_seconds is not None:
            figures.append(Figure(f"level {deeper}'s compile", compile_seconds, "s", compile_source(costs, deeper)))
        if costs.decision_every:
            figures.append(Figure("the decisions' host work", decision_estimate(costs, steps_left), "s",
                                  decision_source(costs, steps_left)))
        return figures

    def _weigh_cache(self, state, observation, steps_left):
        """Before the cache serves: fill where it pays, else wait for a deeper allowed level until its deadline, else
        drop. After its fill: the A/B of its whole steps against the level's steps on the batch."""
        costs, level = observation.costs, observation.level
        if state.cache == "filling":
            return self._compare(state, observation)
        if level not in costs.step:  # the level's steps on the batch are still being timed
            return state, ()
        if state.steps_per_epoch is None:
            return self._drop(state, observation, (
                f"The frozen-prefix cache ({_AUTO}) does not start: it cannot weigh whether it pays without the run's "
                "steps per epoch (an epoch passes before a sample repeats). Give them with the train cell's "
                "fit_to_run(boost_cells.Run(epochs, steps_per_epoch)) before training (Model.train does), or set the "
                "key to true to cache regardless."))
        if observation.repeats is None:  # the probe has not seen an epoch yet
            return state, ()
        fill = state.steps_per_epoch  # data-parallel too: the ranks share what they fill
        figures = (Figure(f"level {level}'s step", costs.step[level] * 1e3, "ms"),
                   Figure("the cache's saving a step", cache_saving(costs, level) * 1e3, "ms",
                          cache_saving_source(costs, level)),
                   Figure("steps left", steps_left, "steps", "the run's length"),
                   Figure("fill", fill, "steps", "an epoch"),
                   Figure("each of its two compiles", largest_compile(costs), "s",
                          "estimate: the run's largest measured compile"))
        if not cache_pays(costs, level, steps_left, fill):
            return self._wait(state, observation, steps_left, fill, figures)
        reason = (f"at frozen level {level} it pays: over the {steps_left - fill} steps left after its fill ({fill} "
                  f"steps) it saves about {cache_saving(costs, level) * (steps_left - fill):.1f} s, more than its "
                  "two compiles")
        return (dataclasses.replace(state, cache="filling"),
                (self._decision(state, observation, "cache", "cache: fill", reason, figures),))

    def _wait(self, state, observation, steps_left, fill, figures):
        """Where the fill does not pay at the level: wait for the deepest allowed level while a fill there can still
        pay (one record a level, with the deadline), else drop."""
        costs, level = observation.costs, observation.level
        deeper = max(state.allowed) if state.allowed and max(state.allowed) > level else None
        deeper_saving = cache_saving(costs, deeper) if deeper is not None else None
        needed = fill + 2 * largest_compile(costs) / deeper_saving if deeper_saving else None
        if needed is not None and steps_left > needed:
            if level in state.waited:
                return state, ()
            reason = (f"at frozen level {level} its fill would not repay its two compiles; it waits for level "
                      f"{deeper}, whose prefix saves more, until {needed:.0f} steps are left (its deadline: a fill "
                      "there no longer pays after that)")
            figures += (Figure(f"level {deeper}'s cache saving a step", deeper_saving * 1e3, "ms",
                               cache_saving_source(costs, deeper)),)
            return (dataclasses.replace(state, cache="waiting", waited=state.waited + (level,)),
                    (self._decision(state, observation, "cache", "cache: wait", reason, figures),))
        if level in state.waited:
            came = ("payback no longer allows a deeper level" if needed is None else
                    f"level {deeper} did not come while a fill there could pay ({steps_left} steps left, {needed:.0f} "
                    "needed)")
            return self._drop(state, observation, (
                f"The frozen-prefix cache ({_AUTO}) does not start: it waited at frozen level {level} for a deeper "
                f"level, but {came}. The frozen prefix runs inside the compiled step; set the key to false to "
                "silence this."))
        deeper_too = "" if needed is None else (
            f"; at level {deeper}, which the run may still freeze to, it would save about {deeper_saving * 1e3:.1f} "
            f"ms a step, which needs {needed:.0f} steps left to repay them")
        return self._drop(state, observation, (
            f"The frozen-prefix cache ({_AUTO}) does not start, as it would not pay in this run: at frozen level "
            f"{level} a step takes {costs.step[level] * 1e3:.1f} ms, of which the cache would save about "
            f"{cache_saving(costs, level) * 1e3:.1f} ms (the frozen prefix's forward pass) over the "
            f"{max(0, steps_left - fill)} steps left after its fill ({fill} steps), less than its two compiles of "
            f"about {largest_compile(costs):.2f} s each{deeper_too}. The frozen prefix runs inside the compiled step; "
            "set the key to false to silence this."))

    def _compare(self, state, observation):
        """The A/B, once the cache served a few whole steps: kept where they beat the level's steps on the batch
        (at a level the cache reached directly, that step as ``expected_saving`` gives it), else dropped."""
        costs, level = observation.costs, observation.level
        if level not in costs.cached_step:
            return state, ()
        on_batch = costs.step.get(level, costs.step[0] - expected_saving(costs, level))
        cached = costs.cached_step[level]
        if cached >= on_batch:
            return self._drop(state, observation, (
                f"The frozen-prefix cache ({_AUTO}) steps aside, as it does not pay on this machine: at frozen level "
                f"{level} a step it served whole took {cached * 1e3:.1f} ms, where a step on the batch takes "
                f"{on_batch * 1e3:.1f} ms. The frozen prefix now runs inside the compiled step; set the key to false "
                "to silence this."))
        figures = (Figure(f"level {level}'s step on the cache", cached * 1e3, "ms"),
                   Figure(f"level {level}'s step on the batch", on_batch * 1e3, "ms",
                          "measured" if level in costs.step else "estimate: the full step less level's saving"))
        reason = f"at frozen level {level} a step it served whole was faster than a step on the batch"
        return (dataclasses.replace(state, cache="kept"),
                (self._decision(state, observation, "cache", "cache: keep", reason, figures),))


def _bar(level, paid, seconds=None, decision=None):
    """What ``level`` must repay, in words (with its compile's ``seconds`` where given): its compile, and the
    decisions' host work left (``decision`` seconds, else 0 or None), where it paid at the last weighing (in
    ``paid``), else those and ``ENTRY_MARGIN`` more."""
    about = "" if seconds is None else f" of about {seconds:.2f} s"
    cost = f"its compile{about}" + (f" and the decisions' host work of about {decision:.2f} s" if decision else "")
    if entry_bar(level, paid) == 1.0:
        return cost
    return (f"{entry_bar(level, paid):g} x {'(' + cost + ')' if decision else cost} (ENTRY_MARGIN: a level not "
            f"allowed before must repay {entry_bar(level, paid) - 1:.0%} more)")


class PolicyRecord(JsonParameter):
    """The policy's state record, held for a checkpoint (``PolicyState.to_dict`` as JSON), written where the policy
    decided something, and read by ``BoostMonitor``.

    Args:
        levels (int): the levels; the record's size grows with them (its costs and levels, a few numbers a level).

    Parameters (state, checkpointed):
        grad_freeze.policy_state (uint8, (1024 + 256 * levels,)): the record, zero padded; empty before the policy's
            first answer.
    """

    def __init__(self, levels):
        super().__init__("grad_freeze.policy_state", 1024 + 256 * int(levels))

    def monitor_state(self):
        """For ``BoostMonitor`` (host side, once per report): the deepest level the schedule may freeze to
        (``freeze_allowed``); nothing before the policy's first answer."""
        record = self.read()
        return {} if record is None else {"freeze_allowed": max(record["allowed"])}
