"""The step a freezing schedule selects, taken inside the graph, and the schedule moved by what it applied.

``FreezeSwitch`` picks, among the steps of the trained suffixes, the one that trains from the schedule's
``train_from()``: in GRAPH_MODE one switch over the compiled branches (MindSpore's ``switch_layer``, as the reference
indexes its ``freeze_nets`` by a Tensor), in PYNATIVE_MODE by reading that index on the host, as PyNative control
flow on a Tensor always does; then it advances the schedule by the optimizer updates the step says it applied (the
``applied`` count of the update-strategy contract), inside the graph, so the schedule holds however MindSpore calls
the train cell. ``ScheduledStep`` is one fixed step of the host route (a level's step on the batch, or a frozen
suffix's on a cached prefix's outputs): it counts the updates and the loss in its graph, and the route takes the
schedule's decisions between steps.
"""
import numpy as np
from mindspore import Tensor, nn, ops

from ...mindspore_internals import SkipUnchangedCompilePhase

__all__ = ["FreezeSwitch", "IndexedCellList", "ScheduledStep"]


class IndexedCellList(nn.CellList):
    """A ``CellList`` that an int32 scalar Tensor indexes in both execution modes: GRAPH_MODE compiles
    ``cells[index]`` into one switch over the cells (MindSpore's ``switch_layer``), PYNATIVE_MODE reads the index on
    the host. A slice gives a plain list (``nn.CellList`` would build a prefixing CellList that renames the
    parameters of every cell in it)."""

    def __getitem__(self, index):
        if isinstance(index, Tensor):
            index = int(index.asnumpy().reshape(-1)[0])
        if isinstance(index, slice):
            return list(self)[index]
        return super().__getitem__(index)


class FreezeSwitch(SkipUnchangedCompilePhase, nn.Cell):
    """The step of the suffix the schedule trains from, chosen in the graph, then the schedule advanced (its
    ``advance`` over the updates the step applied: the schedule's decisions are taken in this step's graph).

    Args:
        schedule (Cell): the freezing schedule (``boost_cells.freezing.schedule.schedules``).
        steps (list of Cell): ``steps[k]`` trains from group ``k``, all with the same inputs and outputs; only the
            steps of the groups the schedule trains from (``schedule.trained_from``) compile, and groups whose
            steps are the same object share one branch.

    Inputs: the steps' inputs. Outputs: ``(outputs, applied)``: the selected step's outputs and its applied updates
    (int32 scalar).
    """

    def __init__(self, schedule, steps):
        super().__init__(auto_prefix=False)
        branches, branch_of = [], {}
        for group in schedule.trained_from:
            if id(steps[group]) not in branch_of:
                branch_of[id(steps[group])] = len(branches)
                branches.append(steps[group])
        self.schedule = schedule
        self.steps = IndexedCellList(branches, auto_prefix=False)
        self.branch_of_group = Tensor(np.array([branch_of.get(id(step), 0) for step in steps], np.int32))

    def construct(self, *inputs):
        outputs, applied = self.steps[self.branch_of_group[self.schedule.train_from()]](*inputs)
        loss = outputs[0] if isinstance(outputs, tuple) else outputs
        return ops.depend(outputs, self.schedule.advance(applied, loss)), applied

    def current_index(self):
        """The first group the next step trains (host int; for tests, monitors and logs)."""
        return self.schedule.current_index()

    def frozen_for_good(self):
        """The leading groups no remaining step trains (host int)."""
        return self.schedule.frozen_for_good()

    def monitor_state(self):
        """Feature state for ``BoostMonitor``: the group the next step trains from."""
        return {"freeze_group": self.current_index()}


class ScheduledStep(SkipUnchangedCompilePhase, nn.Cell):
    """One fixed step of the host route (a level's step on the batch, or a frozen suffix's on a cached prefix's
    outputs) that counts the schedule's updates and the step's loss (``count``); the route takes the schedule's
    decisions itself between steps (``decide_now``), so this graph holds no decision branch.

    Args:
        schedule (Cell): the freezing schedule. step (Cell): the step (``boost_cells.steps.Step``).

    Inputs: the step's. Outputs: the step's outputs alone: the route has no use for the applied count, and each
    graph output is one more tensor built every call (about 20 us here, against a launch-bound step of 4-5 ms).
    """

    def __init__(self, schedule, step):
        super().__init__(auto_prefix=False)
        self.schedule = schedule
        self.step = step

    def construct(self, *inputs):
        outputs, applied = self.step(*inputs)
        loss = outputs[0] if isinstance(outputs, tuple) else outputs
        return ops.depend(outputs, self.schedule.count(applied, loss))
