"""Whether a frozen level pays for its compile on the run at hand, from that run's own measured times.

A frozen level ``k`` (the first ``k`` groups frozen for good) saves every step the backward pass of those groups,
and costs once the compile of its step. Going from the level trained now, ``current``, to ``k`` pays when the steps
left times the saving it adds exceeds its compile (by ``ENTRY_MARGIN`` more for a level not allowed before):

    steps_left * (saving(k) - saving(current)) > compile(k)

Every term comes from the run itself (``CostLedger``, seconds), never from a constant fitted on one machine: where a
step costs a second and a compile two, a level pays within a few steps; where a step costs 10 ms, the same level
needs hundreds. So the same file freezes group by group on the first machine and keeps one level, or none, on the
second.

- ``saving(k)``: measured once level ``k`` has taken a few steps (the full step's median minus its own). Before,
  scaled from the deepest level measured by the share of the network's layers before ``k`` (``shares``), at most
  the full step times that share (a level that measured more than its share, on a noisy machine, would otherwise
  make a deeper level save more than the whole step); before any
  frozen level was measured, ``PRIOR_SAVING`` of the full step per share. A frozen prefix skips its weights'
  gradients, a third of its forward and backward work (the weight-gradient products, one of three products per
  layer), but the full step is a wall time that holds launches and data loading too, which freezing does not save:
  where launches take most of a step, a level measured here saved a fifth of the full step per share (the
  launch-bound ResNet, 18 ms a step), where a compute-bound step saved more than a third. So the prior is a sixth,
  below the least measured, and a level compiles on it only where it surely pays; then its measurement takes over.
- ``ENTRY_MARGIN``: both sides of the rule are measured on a loaded machine, and a level near break-even would be
  allowed at one weighing and not at the next (the full step's median moved by a sixth within one truly launch-bound
  run here, from 19.7 to 16.3 ms). So a level not allowed at the last weighing must repay its compile by a quarter
  more, ``steps_left * gain > (1 + ENTRY_MARGIN) * compile(k)``, and one allowed there stays while it repays the
  compile alone: a level comes only where it pays beyond that noise, and does not come and go with it.
- ``compile(k)``: 0 once level ``k`` has compiled (paid; a resumed run counts it paid too, so it decides as the
  uninterrupted one did). Before, the run's first compile (the full step's, the largest graph of the run): a frozen
  level's step is a smaller graph, so the estimate is again on the safe side.
- the decisions' host work: the host route takes the schedule's decisions itself, op by op between two steps, every
  decision interval from the warm-up on while a deeper level is allowed (none otherwise), until the front is
  frozen: 15-25 ms a decision on this machine's CPU in a quiet process (the first 1.7 times that), 15-80 ms inside
  Model.train with its data pipeline, a few dozen decisions in a run at most. Allowing a level keeps
  them running, so its bar holds those left in the run, each at the mean the route measured
  (``Costs.decision``): ``steps_left * gain > bar * (compile(k) + decisions_left * decision)``. The first
  decision is not in that mean, as it holds what runs once (each op's first call); before the route has timed a
  decision after its first, none are counted (a prior the records name): one decision costs a few hundredths of the
  compile the same bar holds.

The frozen-prefix cache (``cache_pays``) skips the frozen prefix's forward pass too, on samples it has seen: from an
epoch after it starts filling, every step saves ``cache_saving(k)``. It costs two compiles (its step on the prefix's
outputs and the prefix's own inference graph), each estimated as the run's largest, so it fills where

    (steps_left - fill_steps) * cache_saving(k) > 2 * largest compile

with ``fill_steps`` the steps before the samples come round again (an epoch's).

``cache_saving(k)``: measured once the cache has served a few whole steps (the level's step on the batch less its
step on the cache); before, ``FORWARD_SHARE`` of what freezing level ``k`` saved, as measured (a prefix's forward
pass is one product a layer where its backward pass, which freezing skipped, is two), and never more than level
``k``'s own step, once measured (a step on a loaded machine can make the full step, and so the level's saving, look
larger than it is).
"""
import dataclasses

__all__ = ["Costs", "ENTRY_MARGIN", "FORWARD_SHARE", "PRIOR_SAVING", "cache_pays", "cache_saving",
           "cache_saving_source", "compile_estimate", "compile_source", "decision_estimate", "decision_source",
           "decisions_left", "entry_bar", "expected_saving", "largest_compile", "layer_shares", "paying_levels",
           "saving_source"]

PRIOR_SAVING = 1 / 6  # below the least share of the full step per share of layers a frozen level measured saving
FORWARD_SHARE = 1 / 2  # a prefix's forward pass against its backward pass (one product a layer against two)
ENTRY_MARGIN = 1 / 4  # how much more than its compile a level not yet allowed must repay (the measured step's noise)


@dataclasses.dataclass(frozen=True)
class Costs:
    """A run's measured costs, in seconds.

    Attributes:
        step (dict): ``{level: median seconds of a step at that level}`` for the levels measured (0: the full step).
        compile (dict): ``{level: seconds its compile took}`` for the levels compiled so far in the run.
        shares (tuple of float): ``shares[k]``, the share of the network's layers in the groups before ``k``
            (``shares[0]`` is 0, increasing).
        cached_step (dict): ``{level: median seconds of a step on the frozen-prefix cache's outputs}``, for the
            levels whose steps the cache served whole.
        decision (float): the mean seconds of the schedule's decisions the host route took after its first; None
            before one was timed (or where the route takes none).
        decision_every (int): the calls between two of those decisions (a decision interval's updates times the
            calls an update takes); 0 where the route takes none.
    """

    step: dict
    compile: dict
    shares: tuple
    cached_step: dict = dataclasses.field(default_factory=dict)
    decision: float = None
    decision_every: int = 0


def layer_shares(layers):
    """``shares[k]``: the share of the layers in the segments before ``k``, for ``layers[g]`` layers in segment ``g``
    (the head's last); a layer stands for a step's work whatever its width, as a residual network's stages do."""
    total = max(1, sum(layers))
    shares, before = [], 0
    for count in layers:
        shares.append(before / total)
        before += count
    return tuple(shares)


def expected_saving(costs, level):
    """Seconds a step at ``level`` saves against a full step (measured, else estimated as the module says); None
    before the full step was measured."""
    full = costs.step.get(0)
    if full is None:
        return None
    if level == 0:
        return 0.0
    if level in costs.step:
        return full - costs.step[level]
    measured = [k for k in costs.step if k > 0 and costs.shares[k] > 0]
    if measured:  # at most the full step a share: no level saves more than the whole step's share of its layers
        deepest = max(measured)
        per_share = min(full, max(0.0, full - costs.step[deepest]) / costs.shares[deepest])
    else:
        per_share = full * PRIOR_SAVING
    return per_share * costs.shares[level]


def saving_source(costs, level):
    """Where ``expected_saving(costs, level)`` comes from, in words: measured, scaled from a measured level, or the
    prior (named)."""
    if level in costs.step:
        return "measured"
    measured = [k for k in costs.step if k > 0 and costs.shares[k] > 0]
    if measured:
        return f"estimate: level {max(measured)}'s measured saving, scaled by the layers' shares"
    return "prior: PRIOR_SAVING, a sixth of the full step a share of layers"


def compile_source(costs, level):
    """Where ``compile_estimate(costs, level)`` comes from, in words."""
    if level in costs.compile:
        return "measured: compiled already, paid"
    return "estimate: the run's largest measured compile"


def cache_saving_source(costs, level):
    """Where ``cache_saving(costs, level)`` comes from, in words."""
    if level in costs.step and level in costs.cached_step:
        return "measured"
    bound = " (at most the level's own step)" if level in costs.step else ""
    return f"prior: FORWARD_SHARE, half of the level's saving ({saving_source(costs, level)}){bound}"


def largest_compile(costs):
    """The run's largest compile so far (seconds: the full step's graph, the largest of the run), what an
    uncompiled graph is estimated to cost; None before any compile was measured."""
    return max(costs.compile.values()) if costs.compile else None


def compile_estimate(costs, level):
    """Seconds level ``level``'s compile still costs: 0 once compiled, else ``largest_compile``; None before any
    compile was measured."""
    if level in costs.compile:
        return 0.0
    return largest_compile(costs)


def decisions_left(costs, steps_left):
    """How many of the schedule's decisions the route may still take in ``steps_left`` steps (int): one every
    ``decision_every`` calls, 0 where it takes none."""
    return -(-steps_left // costs.decision_every) if costs.decision_every else 0


def decision_estimate(costs, steps_left):
    """Seconds the decisions the route may still take in ``steps_left`` steps cost the host: ``decisions_left``
    times the measured mean (``Costs.decision``), 0 before a decision after the route's first was timed."""
    return decisions_left(costs, steps_left) * (costs.decision or 0.0)


def decision_source(costs, steps_left):
    """Where ``decision_estimate(costs, steps_left)`` comes from, in words."""
    if costs.decision is None:
        return "prior: none counted until the route has timed a decision after its first (which runs each op once)"
    return (f"measured: {decisions_left(costs, steps_left)} decisions left x {costs.decision * 1e3:.1f} ms each (the "
            "mean after the first)")


def paying_levels(costs, current, steps_left, paid=()):
    """The frozen levels above ``current`` that pay within ``steps_left`` steps (a tuple, increasing): those where
    ``steps_left * (saving(k) - saving(current))`` exceeds ``entry_bar(k, paid)`` times ``compile(k)`` and the
    decisions' host work left (``decision_estimate``), ``paid`` being the levels that paid at the last weighing; ()
    until the full step and a compile are measured."""
    now = expected_saving(costs, current)
    if now is None:
        return ()
    paying, decisions = [], decision_estimate(costs, steps_left)
    for level in range(current + 1, len(costs.shares)):
        saving, compile_seconds = expected_saving(costs, level), compile_estimate(costs, level)
        if compile_seconds is None:
            continue
        if steps_left * (saving - now) > entry_bar(level, paid) * (compile_seconds + decisions):
            paying.append(level)
    return tuple(paying)


def entry_bar(level, paid):
    """How many times its compile ``level`` must repay: 1 where it paid at the last weighing (in ``paid``), else
    ``1 + ENTRY_MARGIN``."""
    return 1.0 if level in paid else 1.0 + ENTRY_MARGIN


def cache_saving(costs, level):
    """Seconds a step at ``level`` on the cache's outputs saves against the same level's step on the batch: measured
    where both are, else ``FORWARD_SHARE`` of the level's saving (``expected_saving``); None before the full step was
    measured. The estimate is at most the level's own step, where measured: the cache cannot save more than it."""
    if level in costs.step and level in costs.cached_step:
        return costs.step[level] - costs.cached_step[level]
    saving = expected_saving(costs, level)
    if saving is None:
        return None
    return min(FORWARD_SHARE * saving, costs.step.get(level, float("inf")))


def cache_pays(costs, level, steps_left, fill_steps):
    """Whether filling the cache at ``level`` pays: ``(steps_left - fill_steps) * cache_saving(level)`` (no step saves
    anything before the samples were filled: an epoch's steps) exceeds two compiles at the run's largest; False until
    a step and a compile are measured."""
    saving, compile_seconds = cache_saving(costs, level), largest_compile(costs)
    if saving is None or compile_seconds is None:
        return False
    return (steps_left - fill_steps) * saving > 2 * compile_seconds
