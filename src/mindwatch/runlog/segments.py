"""A rank's run segments as the scan keeps them: where each lies in the step columns, and
what it logged besides its steps.

A segment runs from one ``run`` record to the next: a run that stopped and was resumed into
the same log directory appends a second ``run`` ... ``end`` to the same file. ``Scanner``
opens a segment at each ``run`` record in the pass that fills the columns (the batch says how
many steps came before each record), so a segment costs its few records, never a second pass
over its steps; ``figures`` then reads its bounds off the columns.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ..records import Step
from .lines import Record


@dataclass
class Segment:
    start: int                      # index of its first step record in the step columns
    stop: int = 0                   # one past its last step record (set by ``figures``)
    anomalies: list[Record] = field(default_factory=list)
    rewinds: list[Record] = field(default_factory=list)
    end: Record | None = None       # its `end` record; None: it is running, or it died
    skipped_steps: int = 0          # its step records with a truthy `skipped`
    # What mindwatch could not watch in it: the fix each notice with ``unwatched`` names
    # (records.Notice.UNWATCHED), in order; and whether any of its step records holds a
    # loss or a gradient norm (not null; NaN counts: it was seen). views: report/watched.py
    unwatched: list[str] = field(default_factory=list)
    measured: bool = False
    # The steps its first step record covers (``steps_covered``: the sink size in dataset
    # sink mode), set by the scan: its own steps start after the step before them.
    first_covered: int = 1
    # Read off the columns by ``figures``; None when the segment logged no step (or no
    # finite loss, for the losses).
    first_step: Any = None
    last_step: Any = None
    first_loss: float | None = None          # its first finite loss
    last_loss: float | None = None           # its last finite loss
    last_loss_smooth: Any = None             # the smoothed loss of its last step record

    @property
    def step_count(self) -> int:
        """Its step records (a record covers ``steps_covered`` steps)."""
        return self.stop - self.start

    @property
    def first_trained(self) -> Any:
        """The first step it trained: a resumed segment's is the step after the one it
        resumed from. None when it logged no step."""
        if not isinstance(self.first_step, int):
            return None
        return self.first_step - self.first_covered + 1

    @property
    def steps_trained(self) -> int:
        """The steps it trained, from its first to its last: its own, not the run's count
        (a segment resumed after step 10 that ends at step 20 trained 10); steps a rewind
        trains again count once. 0 when it logged no step."""
        first, last = self.first_trained, self.last_step
        if first is None or not isinstance(last, int):
            return 0
        return max(0, last - first + 1)


def _finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and math.isfinite(value)


def _first_finite(column: Sequence[Any], indexes: range) -> Any:
    # An index walk, not islice: the latest segment of a long run starts far into the column,
    # and the walk stops at its first step in all but a run of non-finite losses.
    return next((column[i] for i in indexes if _finite(column[i])), None)


def figures(segments: list[Segment], steps: dict[str, Sequence[Any]]) -> None:
    """Sets each segment's ``stop`` (the next one's start; the column's end for the last) and
    its figures from the step columns."""
    count = len(steps[Step.STEP])
    stops = [segment.start for segment in segments[1:]] + [count]
    loss = steps[Step.LOSS]
    for segment, stop in zip(segments, stops, strict=True):
        segment.stop = stop
        if stop <= segment.start:
            continue
        first, last = segment.start, stop - 1
        segment.first_step, segment.last_step = steps[Step.STEP][first], steps[Step.STEP][last]
        segment.last_loss_smooth = steps[Step.LOSS_SMOOTH][last]
        segment.first_loss = _first_finite(loss, range(first, stop))
        segment.last_loss = _first_finite(loss, range(last, first - 1, -1))
