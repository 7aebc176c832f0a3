"""Host-side step features in one place: hooks that run on the host around each call of a train cell.

A feature that needs the host between steps is a hook listed in the cell's ``host_hooks``; ``HostHooks.__call__``
runs the active ones around each call. The hook protocol:

- ``active`` (bool): whether the hook runs; a hook may step aside for the rest of the run (the frozen-prefix cache,
  where it does not pay).
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
from mindspore import Tensor

from .config import warn_user

__all__ = ["HostHooks", "PrefixCacheRoute"]


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
        """Whether the host hooks can run around this call: no active hook, or compiled (run, in PyNative) inside the
        cell's own call. False when the cell is compiled inside another Cell's graph with an active hook."""
        return not self.active_hooks or self.__dict__.get("_host_call", False)

    @property
    def host_hooks_refusal(self):
        """The error message for a cell with active host hooks compiled where they cannot run."""
        names = ", ".join(type(hook).__name__ for hook in self.active_hooks)
        return (f"For '{type(self).__name__}', the host-side feature(s) {names} need the host around every step, "
                "but the cell is being compiled inside another Cell's graph (nested, or dataset sink mode), where no "
                "host code runs between steps. Call the train cell directly, use dataset_sink_mode=False, or switch "
                "the feature off.")


class PrefixCacheRoute:
    """The frozen-prefix cache as a host hook: while active it takes every step.

    With ``k = schedule.frozen_for_good()`` leading groups frozen, it looks the batch's first input (one sample per
    row) up in the cache (``FrozenPrefixCache``: the outputs of the stages before group ``k``, fingerprinted) and
    runs ``steps[k]`` on those outputs and the other inputs; with ``k = 0`` it runs ``full_step`` on the batch, with
    no host copy of it. Once it steps aside (``step_aside``), the cell's own step (the freezing switch, the frozen
    prefix run inside the compiled step) takes every step.

    Args:
        schedule (Cell): the freezing schedule. cache (FrozenPrefixCache): the cache.
        full_step (Cell): the step that trains every group (a ``ScheduledStep``), for ``k = 0``.
        steps (dict): ``{k: step}`` for every ``k >= 1`` the schedule reaches; every step returns ``(outputs,
            applied)``.
    """

    required = False

    def __init__(self, schedule, cache, full_step, steps):
        self.schedule = schedule
        self.cache = cache
        self.full_step = full_step
        self.steps = steps
        self.active = True
        self.aside = None  # why the route stepped aside

    def cells(self):
        """Every step the route may run (for the train cell's Cell tree)."""
        return [self.full_step, *self.steps.values()]

    def step_aside(self, why):
        """Stop taking steps for the rest of the run, with one ``BoostConfigWarning`` that says ``why`` (naming the
        key), attributed to the user's line."""
        if self.active:
            self.active, self.aside = False, why
            warn_user(why)

    def before_step(self, cell):
        """Nothing before a step."""

    def after_step(self, cell, inputs, outputs):
        """Nothing after a step."""

    def take_step(self, cell, inputs):
        """The step, on the cached prefix outputs once groups are frozen for good."""
        level = self.schedule.frozen_for_good()
        if level == 0:
            return self.full_step(*inputs)[0]
        if not inputs:
            raise TypeError(f"For '{type(cell).__name__}', the frozen-prefix cache needs the batch as the first input, "
                            "but the cell was called without inputs.")
        first = inputs[0].asnumpy() if isinstance(inputs[0], Tensor) else np.asarray(inputs[0])
        return self.steps[level](Tensor(self.cache(first, level)), *inputs[1:])[0]
