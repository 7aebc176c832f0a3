"""Host-side step features in one place: hooks that run on the host around each call of a train cell.

A feature that needs the host between steps (the first-overflow report runs PyNative cell hooks on the step's
batch) is a hook with ``before_step(cell)``
and ``after_step(cell, inputs, outputs)``, listed in the cell's ``host_hooks``; ``HostHooks.__call__`` runs them
around each call. A hook may also take the step itself (``take_step(cell, inputs)`` returning the outputs, or None
to leave it to the cell): the frozen-prefix cache looks the batch up and runs the suffix's step on the cached
outputs. Such a call exists only when Python calls the cell. Nested in another Cell's graph (dataset sink mode's
``_DataWrapper`` calls the train cell from its ``construct``), the cell's ``construct`` is compiled into the outer
graph and no hook could run, so compiling it there raises instead of silently dropping the feature.
"""

import numpy as np
from mindspore import Tensor

__all__ = ["FrozenPrefixHook", "HostHooks", "OverflowReportHook"]


class HostHooks:
    """Mixin for a train Cell: runs ``host_hooks`` around each call, and refuses to compile nested while it has any.

    The cell's ``construct`` starts with ``if not self.host_hooks_ready: raise RuntimeError(self.host_hooks_refusal)``.
    MindSpore reads both properties while compiling ``construct`` (PyNative: on every call); the condition is a
    constant, so the compile fails with that error exactly when the cell has host hooks but is being compiled
    outside its own ``__call__``, i.e. nested in another Cell's graph. With no hooks, ``__call__`` is the plain
    ``Cell.__call__``.
    """

    host_hooks = ()

    def __call__(self, *inputs):
        if not self.host_hooks:
            return super().__call__(*inputs)
        for hook in self.host_hooks:
            hook.before_step(self)
        outputs = None
        for hook in self.host_hooks:
            take_step = getattr(hook, "take_step", None)
            outputs = None if take_step is None else take_step(self, inputs)
            if outputs is not None:
                break
        if outputs is None:
            object.__setattr__(self, "_host_call", True)
            try:
                outputs = super().__call__(*inputs)
            finally:
                object.__setattr__(self, "_host_call", False)
        for hook in self.host_hooks:
            hook.after_step(self, inputs, outputs)
        return outputs

    @property
    def host_hooks_ready(self):
        """Whether the host hooks can run around this call: no hooks, or compiled (run, in PyNative) inside the
        cell's own call. False when the cell is compiled inside another Cell's graph with hooks."""
        return not self.host_hooks or self.__dict__.get("_host_call", False)

    @property
    def host_hooks_refusal(self):
        """The error message for a cell with host hooks compiled where they cannot run."""
        names = ", ".join(type(hook).__name__ for hook in self.host_hooks)
        return (f"For '{type(self).__name__}', the host-side feature(s) {names} need the host around every step, "
                "but the cell is being compiled inside another Cell's graph (nested, or dataset sink mode), where no "
                "host code runs between steps. Call the train cell directly, use dataset_sink_mode=False, or switch "
                "the feature off.")


class OverflowReportHook:
    """The first-overflow report (``diagnostics.FirstOverflowReporter``) as a host hook.

    Args:
        reporter (FirstOverflowReporter): writes the report on the first overflowing step.
        source (Cell): the loss-scaled step whose ``network`` and ``scale_sense`` the report reads; default the
            train cell the hook runs on.
        pair (int): in a GAN cell's outputs ``(losses, overflows, scales)``, the index of this pair's flag;
            default None: the flag is ``outputs[1]``.
    """

    def __init__(self, reporter, source=None, pair=None):
        self.reporter = reporter
        self.source = source
        self.pair = pair

    def _source(self, cell):
        return cell if self.source is None else self.source

    def before_step(self, cell):
        self.reporter.before_step(self._source(cell))

    def after_step(self, cell, inputs, outputs):
        overflow = outputs[1] if self.pair is None else outputs[1][self.pair]
        self.reporter.after_step(self._source(cell), inputs, overflow)


class FrozenPrefixHook:
    """The frozen-prefix cache as a host hook: when the schedule has frozen groups for good, it takes the step.

    With ``k = schedule.frozen_for_good()`` leading groups frozen, it looks the batch's first input (one sample per
    row) up in the cache (``FrozenPrefixCache``: the outputs of the stages before group ``k``, fingerprinted) and
    runs ``steps[k]`` on those outputs and the other inputs; with ``k = 0`` the cell takes its own step.

    Args:
        schedule (FreezeSwitch): the freezing schedule. cache (FrozenPrefixCache): the cache.
        steps (dict): ``{k: step}`` for every ``k`` the schedule reaches, each with the cell's outputs.
    """

    def __init__(self, schedule, cache, steps):
        self.schedule = schedule
        self.cache = cache
        self.steps = steps

    def before_step(self, cell):
        """Nothing before a step."""

    def after_step(self, cell, inputs, outputs):
        """Nothing after a step."""

    def take_step(self, cell, inputs):
        """The step on the cached prefix outputs, or None while nothing is frozen for good."""
        level = self.schedule.frozen_for_good()
        step = self.steps.get(level)
        if step is None:
            return None
        if not inputs:
            raise TypeError(f"For '{type(cell).__name__}', the frozen-prefix cache needs the batch as the first input, "
                            "but the cell was called without inputs.")
        first = inputs[0].asnumpy() if isinstance(inputs[0], Tensor) else np.asarray(inputs[0])
        return step(Tensor(self.cache(first, level)), *inputs[1:])
