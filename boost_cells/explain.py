"""What a boost config will do, in words: for ``python -m boost_cells explain`` and ``Model.train``'s log.

``explain(config, run=None, workers=None)`` gives the lines of the summary: the resolved level and the six feature
switches; each key the config gives that differs from its level's default (``BoostConfig.level``: a key left out is not
"different"); and what each feature that is on will do. For gradient freezing: the schedule, the groups, when freezing
can start and whether the frozen-prefix cache applies and what it needs; then accumulation, AdaSum (and the
data-parallel run it needs), LessBN, DimReduce, group loss scales and the ``"loss_scale"`` policy. ``summary(config,
run=None)`` is the one-line version: the level, the features on, and when freezing can start. ``run_differs(plan,
updates)`` (``boost_cells.freezing.schedule.plan``'s) says what a freezing schedule made for another run length does in
a run: the text of the train cell's warning.

A ``Run(epochs, steps_per_epoch)`` (``boost_cells.Run``) puts the schedule in that run's updates and epochs, counted as
``Model.train`` counts them (``Run.updates``), along the train cell's own path (``FreezePlan.in_run``): a left-out
``grad_freeze.total_steps`` is then the run's updates, as the train cell's ``fit_to_run`` sets it, and a given one
that differs is kept, as it keeps it (with a warning that says what the schedule does in the run). Without a run,
``total_steps`` (given, or the default 65536) is the run length assumed.

Every freezing number comes from the ``FreezePlan`` the train cell itself follows (``Model.train`` passes its
cell's own, ``plan``, so its log reads the one plan the cell was fitted to; without it one is made from the config
as the cell would make it), and AdaSum's groups from ``adasum_groups``, so the words say what the step does.
"""
import json
from types import MappingProxyType

from .config import FEATURES, BoostConfig, freeze_keys_unread
from .freezing.host.payback import ENTRY_MARGIN
from .freezing.schedule.plan import FreezePlan, run_differs
from .run import Run
from .rules import check
from .updates.adasum import adasum_groups

__all__ = ["Run", "explain", "run_differs", "summary"]

# The feature that reads a key of the shared 'common' section (a key of a feature's own section is read by it).
_READ_BY = MappingProxyType({"common.device_number": "adasum", "common.gradient_split_groups": "less_bn",
                             "common.grad_accumulation_step": "grad_accumulation"})

_MODES = MappingProxyType({"auto": "the level's switches", "manual": "the level's, with the switches the 'boost' "
                           "section lists", "enable_all": "every switch on", "disable_all": "every switch off"})



def _cache_needs(groups):
    """What the frozen-prefix cache needs of the network: a stage a group, as the groups are cut at its stages."""
    return (f"a network of at least {groups} stages with trainable parameters, one a group (an nn.SequentialCell or "
            "boost_cells.Stages, optionally in an nn.WithLossCell and under LessBN)")


def _json(value):
    """A value as the JSON file writes it (true, null, "auto")."""
    return json.dumps(value)


def _number(value):
    """A count or share for reading: at most two decimals, no trailing zeros (44.0 -> "44", 0.591 -> "0.59"), one
    significant digit below 0.01 (0.0002)."""
    if 0 < abs(value) < 0.01:
        return f"{value:.1g}"
    return f"{value:.2f}".rstrip("0").rstrip(".")


def _percent(value):
    return _number(value * 100) + "%"


def _scale(value):
    """A loss scale or factor as written: a whole number in full (16777216, not 1.67772e+07)."""
    return str(int(value)) if float(value).is_integer() else f"{value:g}"


def _plural(count, word):
    """``count`` and ``word``, plural unless the count is 1 ("1 update", "528 updates")."""
    return f"{count} {word}" + ("" if count == 1 else "s")


class _Plan:
    """A config with the run it trains in: the numbers every part of the summary shares.

    Attributes:
        updates (int or None): the run's optimizer updates (``Run.updates``), None without a run.
        section (Mapping): the config's ``grad_freeze`` section.
        freeze (FreezePlan): the freezing plan the train cell follows: the cell's own where given (``plan``), else
            made for the run when the config leaves ``total_steps`` out (``FreezePlan.in_run``, as the cell's
            ``fit_to_run`` fits it), else for the given (or default) ``total_steps``.
    """

    def __init__(self, config, run, plan=None):
        self.config, self.run = config, run
        self.accumulation = config.accumulation_steps
        self.updates = None if run is None else run.updates(self.accumulation)
        self.section = config.section("grad_freeze")
        self.total_given = config.given("grad_freeze.total_steps")
        if plan is not None:
            self.freeze = plan
        else:
            self.freeze = FreezePlan.from_section(self.section, run_assumed=not self.total_given)
            if self.updates is not None:
                self.freeze = self.freeze.in_run(self.updates)

    @property
    def length(self):
        """The run length the freezing schedule is made for: ``grad_freeze.total_steps`` as the train cell gets it."""
        return self.freeze.total_steps

    def at(self, update, brief=False):
        """``update`` (counted from 1) in words: of how many (unless ``brief``), and in which epoch of the run (its
        last micro-step's)."""
        if self.run is None:
            return f"update {update}"
        if update > self.updates:
            return f"update {update}, after the run's {_plural(self.updates, 'update')}"
        epoch = -(-update * self.accumulation // self.run.steps_per_epoch)
        if brief:
            return f"update {update} (epoch {epoch})"
        return f"update {update} of {self.updates} (epoch {epoch} of {self.run.epochs})"

    def epochs(self, updates):
        """A number of updates in epochs of the run (a run is needed)."""
        epochs = _number(updates * self.accumulation / self.run.steps_per_epoch)
        return f"{epochs} epoch" + ("" if epochs == "1" else "s")


def _schedule_name(freeze):
    """A plan's kind as the summary names it."""
    return "automatic" if freeze.kind == "auto" else freeze.kind


def _automatic_lines(plan, name, start):
    section, length, criterion = plan.section, plan.length, plan.freeze.criterion
    interval = f"auto_interval_share {section['auto_interval_share']:g} of {length}"
    if plan.run is not None:
        interval += f", {plan.epochs(criterion.interval)}"
    warmup = f"auto_warmup_share {section['auto_warmup_share']:g} of {length}"
    whole = plan.freeze.first_frozen_update - 1
    warmup = f"nothing freezes before {start}: the first {_plural(whole, 'update')} ({warmup}, and two decisions " \
        "to see a group settle) train every group"
    below, copied = f"auto_threshold {criterion.threshold:g}", "outside the head"
    if criterion.head_ratio > 0:
        below += f" (or auto_head_ratio {criterion.head_ratio:g} of the head's: a front moving far slower than " \
            "its head, as a pretrained one does)"
        copied = "of every group"
    if plan.freeze.payback:
        depth = ("the leading settled groups freeze for good (the last, the head, never does), as deep as the run "
                 "can pay for (payback: each step is timed, and a frozen level is allowed only where the steps left "
                 "times its saving exceed its compile and the host route's decisions left, all measured on this "
                 "run; group by group where steps are "
                 "dear, the whole front at once or not at all where compiles are; it needs the host between steps, "
                 "and without it, the whole front at once)")
    else:
        depth = ("the whole front (every group but the last, the head, which never freezes) freezes for good at once "
                 "when all of it has settled (a front whose weights still move waits): one frozen level, so one more "
                 "step compiles (payback false)")
    learned = "" if criterion.loss_drop <= 0 else (
        f", and only once the network has learned: the training loss's mean over the last interval at least "
        f"{criterion.loss_drop:.0%} below the first interval's (auto_loss_drop)")
    if criterion.last_fall < 1:
        learned += (", and only once the training loss has levelled off: its fall over the "
                    f"last interval at most {criterion.last_fall:.0%} of its whole fall since the first "
                    "(auto_loss_last_fall)")
    return [f"grad_freeze: {name}: at each decision every group's weights are measured against their copy from "
            "the decision before (displacement: |w - w_before| / |w| per 100 updates); a group whose displacement "
            f"stayed below {below} over the last two intervals has settled, and {depth}. Under an optimizer that "
            "normalises its steps (Adam and its kin), auto_threshold is not applied: its steps are about the "
            f"learning rate whatever the gradient. It keeps a copy of the weights {copied} (their memory once more).",
            f"  when: {warmup}{learned}. Then a decision every {_plural(criterion.interval, 'update')} ({interval}) "
            "may freeze the front."]


def _schedule_lines(plan):
    """What the schedule is and when it freezes, in the numbers of the run it is made for."""
    freeze, section, length = plan.freeze, plan.section, plan.length
    groups, freeze_p = freeze.groups, section["freeze_p"]
    name = f"the {_schedule_name(freeze)} schedule (freeze_type {_json(section['freeze_type'])})"
    first = freeze.first_frozen_update
    if first is None:
        why = "one group" if groups == 1 else "freeze_p 1" if freeze_p == 1 else \
            f"a sequence of {freeze.length} updates that reaches no frozen entry"
        return [f"grad_freeze: {name} with {why}: every update trains every group, so nothing freezes."]
    start = plan.at(first)
    if freeze.kind == "auto":
        return _automatic_lines(plan, name, start)
    if freeze.kind == "continuous":
        cycle = freeze.continuous_cycle
        frozen = sum(1 for index in cycle if index > 0)
        for_good = "no group freezes for good" if not freeze.freezes_for_good else "group 0 never trains (freeze_p 0)"
        return [f"grad_freeze: {name}: a fixed cycle of {len(cycle)} updates, repeated: {len(cycle) - frozen} train "
                f"every group, then one update each trains from group 1, ..., {groups - 1} on; so {frozen} of every "
                f"{len(cycle)} updates ({_percent(frozen / len(cycle))}) freeze, and {for_good}.",
                f"  when: freezing starts at {start}. total_steps is not used: the cycle needs no run length."]
    drawn = f"drawn in advance for int(total_steps * 1.01) = {freeze.length} updates"
    if freeze.kind == "interval":
        return [f"grad_freeze: {name}: a sequence {drawn} (seed {section['seed']}), repeated after that. Update 1 "
                f"trains every group; after it an update freezes whenever fewer than 1 - freeze_p = "
                f"{_percent(1 - freeze_p)} of the updates so far froze, from a group drawn at random (shallow "
                f"freezing likelier): about {_percent(1 - freeze_p)} of the updates freeze, none for good.",
                f"  when: freezing starts at {start}."]
    stages = "; ".join(f"from group {k} on from {plan.at(update, brief=True)}" for k, update in freeze.stage_starts[1:])
    whole = f"The first {_plural(first - 1, 'update')} (freeze_p {freeze_p:g} of {length}) train every group; then" \
        if first > 1 else f"From the first update (freeze_p {freeze_p:g})"
    return [f"grad_freeze: {name}: a sequence {drawn}. {whole} the front groups freeze for good, in equal stages "
            f"over the remaining updates, up to training from group {groups - 1} on to the end.",
            f"  when: freezing starts at {start}, training from group 1 on" + (f"; {stages}." if stages else ".")]


def _total_steps_line(plan):
    """Where ``grad_freeze.total_steps`` comes from, and how it compares with the run."""
    total = plan.length
    if plan.run is None:
        if plan.total_given:
            return (f"  total_steps: {total} (given) is the run length the schedule is made for, in updates; "
                    "Model.train keeps a given one (and warns when its run differs).")
        return (f"  total_steps: left out, so the default {total} updates is the run length assumed here; "
                "Model.train sets a left-out total_steps from its run (give the run's epochs and steps per epoch to "
                "see that run).")
    if not plan.total_given:
        return f"  total_steps: left out, so Model.train sets it from the run: {_plural(total, 'update')}."
    if total == plan.updates:
        return f"  total_steps: {total} (given), the run's updates."
    return (f"  total_steps: {total} (given), but the run has {_plural(plan.updates, 'update')}: Model.train keeps "
            f"the given one (and warns), so the schedule is made for {_plural(total, 'update')}.")


def _groups_line(plan):
    section, groups = plan.section, plan.freeze.groups
    if section["cache_frozen_prefix"] == "auto" and plan.freeze.kind == "auto":
        return (f"  groups: up to {groups} nested suffixes of the network's trainable parameters, cut at the network's "
                f"stages that have trainable parameters where it has at least {groups} (for the cache), else front "
                "to back into layers (a layer: a weight with its bias and BatchNorm); group k trains from the k-th "
                "of s-sized steps to the end. An update that trains from group k >= 1 gives the parameters before "
                "it no gradient: the backward pass stops there.")
    if section["cache_frozen_prefix"] is True:
        cut, unit = "at the network's stages that have trainable parameters (for the cache)", "stages"
    else:
        cut, unit = "front to back into layers (a layer: a weight with its bias and BatchNorm)", "layers"
    if plan.config.given("grad_freeze.param_groups"):
        count = (f"{groups} nested suffixes of the network's trainable parameters (given), so the network needs at "
                 f"least {groups} {unit} (the train cell refuses fewer)")
    else:
        count = (f"up to {groups} nested suffixes of the network's trainable parameters (level "
                 f"{plan.config.level_name}'s default, left out), fitted to the network: at most one group a "
                 f"{unit[:-1]}, so a network of fewer than {groups} {unit} gets one group a {unit[:-1]}")
    return (f"  groups: {count}; cut {cut}: group k trains {unit} k * s to the end (s = {unit} // groups). An update "
            "that trains from group k >= 1 gives the parameters before it no gradient: the backward pass stops there.")


def _cache_lines(plan):
    """Whether the frozen-prefix cache applies, and what it needs."""
    section, freeze = plan.section, plan.freeze
    needs = _cache_needs(freeze.groups)
    if not section["cache_frozen_prefix"]:
        return ["  frozen-prefix cache: off (grad_freeze.cache_frozen_prefix false)."]
    if section["cache_frozen_prefix"] == "auto":
        if freeze.kind != "auto":
            return [f"  frozen-prefix cache: off (\"auto\" weighs its payback under the automatic schedule only, and "
                    f"this is the {_schedule_name(freeze)} schedule); set it to true to cache regardless."]
        return [f"  frozen-prefix cache: \"auto\": where the network has enough stages ({needs}), "
                "the cell runs its own construct and dim_reduce is off, the outputs of the groups "
                "frozen for good can be cached per sample, so their forward pass is skipped too (at most "
                f"cache_max_mb {section['cache_max_mb']} MB). Elsewhere it is off, without a warning.",
                "  what it measures first: over the run's first epoch, whether samples repeat (augmentation: it "
                "never fills); at a newly frozen level, the level's steps on the batch; it fills only "
                "where (steps left - an epoch) x the saving expected (half what freezing the level saved: the "
                "prefix's forward pass) repays two compiles at the run's largest, and where it does not, weighs "
                "again at a deeper level the run may still freeze to. Then the steps it serves whole against the "
                "steps on the batch: it stays only where they are faster. It needs the run's steps per "
                "epoch (Model.train gives them; a loop of your own calls the train cell's fit_to_run). Where it does "
                "not pay it steps aside with one warning giving the figures; as with true, it also steps aside where "
                "an epoch's samples do not fit cache_max_mb."]
    if not freeze.freezes_for_good:
        return [f"  frozen-prefix cache: asked for, but the {_schedule_name(freeze)} schedule here never freezes a "
                "group for good, so nothing is cached (the train cell warns); the groups are still cut at the "
                f"network's stages, so it still needs {needs}. Use freeze_type 2 or \"auto\" to cache, or "
                "switch the cache off."]
    return [f"  frozen-prefix cache: applies (the {_schedule_name(freeze)} schedule freezes front groups for good): "
            "their outputs are cached per sample, so their forward pass is skipped too (at most cache_max_mb "
            f"{section['cache_max_mb']} MB); a changed sample or weight is computed again.",
            "  the cache steps aside (one warning; the frozen prefix then runs inside the compiled step) where it "
            "cannot pay: after an epoch of caching, fewer than half of the samples it looks up were seen before "
            "(augmentation), or an epoch's samples at a frozen level's output size would not fit cache_max_mb. It "
            "needs the run's steps per epoch to judge (Model.train gives them; a loop of your own calls the train "
            "cell's fit_to_run).",
            f"  the cache needs: {needs}; the train cell's own construct (a subclass with its own construct "
            "trains without the cache, with a warning); not dataset sink mode on GPU/Ascend (Model.train leaves "
            "the cache out there, with a warning; freezing stays)."]


def _freezing_lines(plan, workers):
    freeze = plan.freeze
    head, *when = _schedule_lines(plan)
    lines = [head]
    if freeze.groups > 1:
        lines.append(_groups_line(plan))
    if freeze.depends_on_run:
        lines.append(_total_steps_line(plan))
    lines += when
    if plan.run is not None and plan.length != plan.updates and freeze.depends_on_run:
        lines.append(f"  in this run of {_plural(plan.updates, 'update')}: {run_differs(freeze, plan.updates)}")
    cache = _cache_lines(plan)
    if workers is not None and workers > 1 and plan.freeze.may_cache:
        cache.append(f"  data-parallel ({workers} workers): over the epoch from the cache's first step at each frozen "
                     "level, the ranks share the outputs their caches compute (AllGathers on each step of it), so "
                     "each rank's cache holds every rank's samples after that epoch, in at most cache_max_mb of host "
                     "memory each.")
    return lines + cache + _break_even_lines(plan)


BREAK_EVEN_COMPILES = (1, 3, 10)  # seconds: a compile on a fast machine, a typical one, a large graph's


def _break_even_lines(plan):
    """What a frozen level must save a step to be allowed over the steps left at the first freezing decision
    (micro-steps, as the frozen levels' route counts them), by payback's rule (``boost_cells.freezing.host.payback``:
    ``steps_left * saving > (1 + ENTRY_MARGIN) * compile`` for a level not allowed before; the cache's
    ``(steps_left - an epoch) * saving > 2 * compile``), for compiles of ``BREAK_EVEN_COMPILES`` seconds; then what
    sink mode and a nested call do to payback and the cache. None without a run, or where nothing freezes in it."""
    first = plan.freeze.first_frozen_update
    if plan.run is None or first is None or first > plan.updates:
        return []
    left = (plan.updates - first + 1) * plan.accumulation  # steps, as the route counts them (micro-steps)
    fill = plan.run.steps_per_epoch
    cache = plan.freeze.may_cache
    lines = [f"  break-even: at the first decision, {plan.at(first)}, {_plural(left, 'step')} are left; a frozen "
             f"level is allowed where it saves more a step than its compile and {ENTRY_MARGIN:.0%} over them "
             f"(payback's rule: steps left x saving > {1 + ENTRY_MARGIN:g} x compile, where the margin keeps a level "
             "near break-even from coming and going with the measured step)"
             + ("; the cache, two compiles over the steps left after an epoch's fill:" if cache else ":")]
    columns = [("compile", [f"{seconds} s" for seconds in BREAK_EVEN_COMPILES]),
               ("a frozen level must save", [f"{_milliseconds((1 + ENTRY_MARGIN) * seconds / left)} a step"
                                             for seconds in BREAK_EVEN_COMPILES])]
    if cache:
        columns.append(("the cache must save", [f"{_milliseconds(2 * seconds / (left - fill))} a step" if left > fill
                                                else "never (the run ends within an epoch)"
                                                for seconds in BREAK_EVEN_COMPILES]))
    widths = [max(map(len, [head, *cells])) for head, cells in columns]
    for row in zip(*([head, *cells] for head, cells in columns)):
        lines.append("      " + "   ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip())
    lines.append("  sink mode (GPU/Ascend) or a call nested in another Cell's graph: no host code runs between steps, "
                 "so nothing times them and payback cannot weigh a level: the whole front freezes at once, its step "
                 "compiled with the full one, whatever it saves; the cache is left out (Model.train warns in sink "
                 "mode; a cell with the cache compiled nested by hand refuses).")
    return lines


def _milliseconds(seconds):
    """A time a step in milliseconds, three significant digits (0.0198 ms, 0.198 ms)."""
    return f"{seconds * 1000:.3g} ms"


def _accumulation_lines(plan):
    steps = plan.accumulation
    if steps == 1:
        return ["grad_accumulation: on over 1 micro-step: every step is an update, as without accumulation."]
    return [f"grad_accumulation: {steps} micro-steps (batches) an update: the optimizer steps once every {steps} "
            "steps, on the mean of their gradients; a micro-batch with non-finite gradients never reaches the "
            "buffer. total_steps and the freezing schedules count updates, not steps."]


def _adasum_compiles(plan):
    """When AdaSum's step graphs compile, with gradient freezing: each level's step as the schedule reaches it (the
    frozen-prefix cache's route), or every level's at the first step (the freezing switch)."""
    if not plan.config.enabled("grad_freeze") or not plan.freeze.freezes:
        return "its one step graph compiles at the first step."
    if plan.freeze.host_route:
        return ("its step graphs compile as the steps that use them first run: the full step's at the first step, a "
                "frozen level's when the schedule first reaches it, so a run compiles one per level it reaches "
                "(with payback, only the levels that repay their compile).")
    return (f"the freezing switch compiles every level's AdaSum step at the first step "
            f"({_plural(len(plan.freeze.trained_from), 'level')}); a short run pays that up front.")


def _adasum_lines(plan, workers):
    config = plan.config
    devices = config.section("common")["device_number"]
    line = (f"adasum: the weight deltas of groups of common.device_number = {devices} rank(s) (each group first "
            "averages its gradients) are combined by the AdaSum rule. It needs data-parallel training over "
            f"device_number x 2**k ranks, k >= 1 ({devices * 2}, {devices * 4}, ...); stand-alone it is the plain "
            f"step. Data-parallel, {_adasum_compiles(plan)}")
    if workers is None:
        return [line]
    if workers == 1:
        return [line, "  with 1 worker: stand-alone, so the plain step."]
    try:
        return [line, f"  with {workers} workers: {adasum_groups(workers, devices)} groups of {devices}."]
    except ValueError as error:
        return [line, f"  with {workers} workers the train cell refuses: {error}"]


def _less_bn_lines(config):
    section = config.section("less_bn")
    parts = ["MindSpore's less_bn graph pass (GRAPH_MODE: residual blocks compile without some of their BatchNorms; "
             "PyNative runs no pass)"]
    if section["fn_flag"]:
        parts.append("the last nn.Dense becomes a feature-normalised head (fn_flag)")
    if section["gc_flag"]:
        parts.append("gradient centralization in the optimizer (gc_flag)")
    parts.append("the optimizer's parameters split for communication fusion at common.gradient_split_groups "
                 f"{_json(config.section('common')['gradient_split_groups'])}")
    return ["less_bn: " + "; ".join(parts) + "."]


def _dim_reduce_lines(config):
    section = config.section("dim_reduce")
    sources = [f"{key} {_json(section[key])}" for key in ("pca_mat_path", "weight_load_dir") if section[key]]
    given = "given: " + ", ".join(sources) if sources else "neither is given, so the train cell refuses"
    return [f"dim_reduce: quasi-Newton steps in a PCA subspace of n_components {section['n_components']} directions "
            f"(line search rho {section['rho']:g}, sigma {section['sigma']:g}) plus momentum gamma "
            f"{section['gamma']:g}, alpha {section['alpha']:g} on the rest; the optimizer's own rule is not used, and "
            "every other feature is off. It needs dim_reduce.pca_mat_path (a .npy matrix) or "
            f"dim_reduce.weight_load_dir (warm-up checkpoints to compute it from): {given}."]


def _loss_scale_lines(config):
    scale = config.loss_scale
    if scale is None:
        return []
    bounds = f"within [{_scale(scale['min_scale'])}, {_scale(scale['max_scale'])}]"
    if scale["type"] == "static":
        policy = f"static: {_scale(scale['init'])}"
    elif scale["type"] == "log2":
        policy = (f"log2: from {_scale(scale['init'])}, log2(scale) + {scale['inc']:g} per clean step and - "
                  f"{scale['dec']:g} per overflow, {bounds}")
    else:
        factor = _scale(scale["factor"])
        policy = (f"dynamic: from {_scale(scale['init'])}, x {factor} after every {scale['window']} consecutive "
                  f"clean steps, / {factor} after {scale['hysteresis']} overflow(s), {bounds}")
    return [f"loss scale: {policy}. The train cell is a BoostTrainOneStepWithLossScaleCell: a step with non-finite "
            "gradients changes no weight and no optimizer state."]


def _feature_lines(plan, workers):
    config = plan.config
    makers = {"grad_freeze": lambda: _freezing_lines(plan, workers),
              "grad_accumulation": lambda: _accumulation_lines(plan),
              "adasum": lambda: _adasum_lines(plan, workers), "less_bn": lambda: _less_bn_lines(config),
              "dim_reduce": lambda: _dim_reduce_lines(config),
              "loss_scale_group": lambda: ["loss_scale_group: a dynamic loss scale per layer group: the loss-scale "
                                           "train cell needs a GroupLossScaleManager as its scale_sense (Model: "
                                           "loss_scale_manager), called between the groups in construct."]}
    lines = [line for name in FEATURES if config.enabled(name) for line in makers[name]()]
    lines += _loss_scale_lines(config)
    report = config.section("diagnostics")["overflow_report"]
    if report is not None:
        lines.append(f"overflow report: the first overflowing step's report goes to {_json(report)}. The loss-scale "
                     "cell writes it, so it needs a loss scale ('loss_scale' section or a loss_scale_manager); a "
                     "host-side feature, so not in dataset sink mode on GPU/Ascend.")
    if not any(config.features.values()):
        lines.insert(0, "Nothing is on: the train cell is a plain training step (nn.TrainOneStepCell's)."
                     if config.loss_scale is None else "No boost feature is on.")
    return lines


def _differing_lines(config):
    """Each key the config gives whose value differs from its level's default config (switches as resolved)."""
    ours, default = config.to_dict(), BoostConfig.level(config.level_name).to_dict()
    unread = freeze_keys_unread(config.section("grad_freeze"))
    lines = []
    for section, values in default.items():
        if section == "level":
            continue
        for key, value in values.items():
            path = f"{section}.{key}"
            if not config.given(path) or ours[section][key] == value:
                continue
            feature = _READ_BY.get(path, section)
            unused = f" (not used: '{feature}' is off)" if feature in FEATURES and not config.enabled(feature) else ""
            if not unused and section == "grad_freeze" and key in unread:
                unused = f" (not used: the {unread[key][0]} schedule does not read it)"
            lines.append(f"  {path}: {_json(ours[section][key])} (default {_json(value)}){unused}")
    head = f"keys that differ from level {config.level_name}'s defaults:"
    return [head + (" none." if not lines else "")] + lines


def _run_line(plan):
    run, steps = plan.run, plan.accumulation
    per_update = "one update a step" if steps == 1 else f"an update every {steps} steps"
    return (f"run: {_plural(run.epochs, 'epoch')} of {_plural(run.steps_per_epoch, 'step')}, {per_update}: "
            f"{_plural(plan.updates, 'update')} ({_number(run.steps_per_epoch / steps)} an epoch).")


def explain(config, run=None, workers=None, plan=None):
    """The summary of what ``config`` will do, as lines of text.

    Args:
        config (BoostConfig, dict or str): the config (as ``BoostConfig.coerce`` takes it).
        run (Run): the run it trains in; default None: ``grad_freeze.total_steps`` is the run length assumed.
        workers (int): data-parallel workers, >= 1, for what AdaSum does; default None: not said.
        plan (FreezePlan): the freezing plan a built train cell follows (its ``freeze_plan``, fitted to the run),
            read instead of one made here from the config (``Model.train`` passes its cell's); default None.

    Returns:
        list of str: the lines, without line ends; details of a feature are indented by two spaces.

    Raises:
        TypeError, ValueError: as ``BoostConfig.coerce``; ``run`` not a ``Run``; ``workers`` not an int >= 1.
    """
    config = BoostConfig.coerce(config, arg="config")
    if run is not None and not isinstance(run, Run):
        raise TypeError(f"For 'explain', 'run' must be a boost_cells.Run or None, but got {type(run).__name__}.")
    if run is not None and run.epochs is None:
        raise ValueError("For 'explain', 'run' must give its epochs (Run(epochs, steps_per_epoch)), but got "
                         f"{run}.")
    if workers is not None:
        check("explain", "workers", workers)
    plan = _Plan(config, run, _checked_plan("explain", plan))
    on = [name for name in FEATURES if config.enabled(name)]
    off = [name for name in FEATURES if not config.enabled(name)]
    mode = config.section("boost")["mode"]
    lines = [f"level {config.level_name}; features (boost.mode {_json(mode)}: {_MODES[mode]}): on: "
             f"{', '.join(on) or 'none'}; off: {', '.join(off) or 'none'}."]
    lines += _differing_lines(config)
    if run is not None:
        lines.append(_run_line(plan))
    return lines + _feature_lines(plan, workers)


def summary(config, run=None, plan=None):
    """One line of ``explain``: the level, the features on, and for gradient freezing its schedule and when it can
    start (in the run, with ``run``); the line ``Model.train`` logs at INFO.

    Args and Raises: as ``explain`` (without ``workers``).
    """
    config = BoostConfig.coerce(config, arg="config")
    plan = _Plan(config, run, _checked_plan("summary", plan))
    on = [name for name in FEATURES if config.enabled(name)]
    if plan.accumulation > 1:
        on[on.index("grad_accumulation")] += f" ({plan.accumulation} micro-steps)"
    if config.loss_scale is not None:
        on.append(f"{config.loss_scale['type']} loss scale")
    line = f"boost level {config.level_name}: " + (", ".join(on) + " on" if on else "no feature on")
    if config.enabled("grad_freeze"):
        line += "; " + _freezing_summary(plan)
    return line + "."


def _checked_plan(who, plan):
    """``plan``, a FreezePlan or None (raises TypeError naming ``who`` otherwise)."""
    if plan is not None and not isinstance(plan, FreezePlan):
        raise TypeError(f"For '{who}', 'plan' must be a FreezePlan (a train cell's freeze_plan) or None, but got "
                        f"{type(plan).__name__}.")
    return plan


def _freezing_summary(plan):
    freeze = plan.freeze
    first = freeze.first_frozen_update
    what = f"{_schedule_name(freeze)} freezing of {_plural(freeze.groups, 'group')}"
    if first is None:
        return what + " never freezes"
    if plan.run is not None and first > plan.updates:
        return what + f" never starts in this run of {_plural(plan.updates, 'update')} (it would at update {first})"
    where = plan.at(first) + ("" if plan.run is not None else f" of total_steps {plan.length}")
    cache = ""
    if plan.freeze.may_cache:
        cache = ", frozen-prefix cache on" if plan.section["cache_frozen_prefix"] is True else \
            ", frozen-prefix cache where it pays"
    return what + f" can start at {where}{cache}"
