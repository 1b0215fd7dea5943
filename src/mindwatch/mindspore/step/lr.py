"""The learning rate applied at a step, read from the optimizer on the host.

After a step the optimizer's ``global_step`` already counts that step, so ``get_lr()`` then
gives the *next* step's LR. The LR applied at the step that just ran is the schedule at
``global_step - 1``. This is only needed without ``wrap``: the wrapped step returns the LR it
used, read in the graph before the update.
"""
from __future__ import annotations

import mindspore as ms
import numpy as np
from mindspore import nn

from ..compat import schedule_table

# Steps of a schedule evaluated in one graph launch. Evaluating a schedule Cell from Python is
# a graph launch, 1-3 ms on the CPU: per step, most of what monitoring without ``wrap`` cost.
# MindSpore's schedules are elementwise in the step, so one launch over a vector of steps
# (measured: 4096 steps in 32 ms, 8 us a step) gives the same float32 values.
CHUNK = 1024


class _Schedule:
    """One schedule Cell, evaluated a chunk of steps at a time.

    Kept honest two ways: each chunk's first and last values are checked against single
    evaluations (a schedule that is not elementwise falls back to one launch per step for
    good), and a schedule with Parameters of its own (a knob a callback turns, as the demo's
    fault injection does) has their values compared at every read: a change drops the chunk.
    """

    def __init__(self, schedule: nn.Cell):
        self.schedule = schedule
        self.knobs = list(schedule.get_parameters())
        self._knob_values: list[bytes] = []
        self._start = 0
        self._values: np.ndarray | None = None
        self._vectorised = True

    def _single(self, index: int) -> float:
        return float(self.schedule(ms.Tensor(index, ms.int32)).asnumpy().reshape(-1)[0])

    def value(self, index: int) -> float:
        if self.knobs:
            knob_values = [p.asnumpy().tobytes() for p in self.knobs]
            if knob_values != self._knob_values:
                self._knob_values, self._values = knob_values, None
        if not self._vectorised:
            return self._single(index)
        values = self._values
        if values is None or not self._start <= index < self._start + len(values):
            values = self._chunk(index)
            if values is None:
                return self._single(index)
        return float(values[index - self._start])

    def _chunk(self, start: int) -> np.ndarray | None:
        steps = ms.Tensor(np.arange(start, start + CHUNK, dtype=np.int32))
        try:
            values = self.schedule(steps).asnumpy().reshape(-1)
        except Exception:              # a schedule that takes only a scalar step
            values = None
        if (values is None or values.size != CHUNK
                or values[0] != np.float32(self._single(start))
                or values[-1] != np.float32(self._single(start + CHUNK - 1))):
            self._vectorised = False
            return None
        self._start, self._values = start, values
        return values


class LrReader:
    """The LR of every parameter group applied at the step that just finished, read on the
    host (without ``wrap``). Schedules are evaluated a chunk at a time (``_Schedule``)."""

    def __init__(self) -> None:
        self._schedules: dict[int, _Schedule] = {}

    def _schedule_value(self, schedule: nn.Cell, index: int) -> float:
        inner = schedule_table(schedule)
        if isinstance(inner, ms.Parameter):
            values = inner.asnumpy().reshape(-1)
            if values.size == 1:            # a fixed LR wrapped as a schedule (group LRs)
                return float(values[0])
            # A per-step LR list: MindSpore's gather reads past the end as 0; say so plainly.
            return float(values[index]) if 0 <= index < values.size else float("nan")
        cached = self._schedules.get(id(schedule))
        if cached is None or cached.schedule is not schedule:
            cached = self._schedules[id(schedule)] = _Schedule(schedule)
        return cached.value(index)

    def applied(self, optimizer: nn.Optimizer | None) -> list[float] | None:
        """Every group's LR applied at the step that just finished (one entry without
        groups); None without an optimizer."""
        if optimizer is None:
            return None
        return self._at(optimizer, max(_global_step(optimizer) - 1, 0))

    def coming(self, optimizer: nn.Optimizer) -> list[float]:
        """Every group's LR the next step will apply (before the first: the first's)."""
        return self._at(optimizer, _global_step(optimizer))

    def _at(self, optimizer: nn.Optimizer, index: int) -> list[float]:
        learning_rate = optimizer.learning_rate
        if optimizer.is_group_lr:
            entries = list(learning_rate)
            groups = [entries[i] for i in group_indices(optimizer)]
        else:
            groups = [learning_rate]
        values = []
        for group in groups:
            if isinstance(group, ms.Parameter):
                values.append(float(np.asarray(group.asnumpy()).reshape(-1)[0]))
            else:
                values.append(self._schedule_value(group, index))
        return values


def _global_step(optimizer: nn.Optimizer) -> int:
    return int(optimizer.global_step.asnumpy().reshape(-1)[0])


def group_indices(optimizer: nn.Optimizer) -> list[int]:
    """Index of each parameter group's first entry in ``optimizer.learning_rate``.

    With group LRs MindSpore keeps one LR entry per *parameter*, all parameters of a group
    sharing the same object; a group is therefore one distinct object, in first-seen order.
    """
    if not optimizer.is_group_lr:
        return [0]
    seen, indices = set(), []
    for index, entry in enumerate(optimizer.learning_rate):
        if id(entry) not in seen:
            seen.add(id(entry))
            indices.append(index)
    return indices
