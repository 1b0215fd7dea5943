"""What a rank's log says of where its wall-clock time went, collected in the scan's one pass
for ``goodput.py``: each step record's end time and the steps it covers (two columns, 16
bytes a step), which step records were withheld, the sum of the logged data times, and per
segment its start (the ``run`` record's time), its latest record's time, and the steps
after which it hung, replayed or rewound.

Everything here is read off what the scan decodes anyway (a step line's ``time``,
``skipped`` and ``steps_covered`` are declared fields of ``fast.StepLine``; ``data_time_s``
is declared beside them), so it costs the summary no decoding of its own. The step time
column that the steady pace is taken from is the scan's (``Step.STEP_TIME_S``).
"""
from __future__ import annotations

import math
from array import array
from collections.abc import Callable
from dataclasses import dataclass, field
from itertools import compress
from typing import Any, TypeGuard

from .. import records
from ..anomaly import HANG
from ..records import Anomaly, Common, End, Replay, Rewind, Step
from .batch import Batch
from .columns import field_values


@dataclass
class SegmentTimes:
    start: int                            # index of its first step record in the columns
    # its `run` record's time, or its `end` record's less its ``elapsed_s`` when earlier;
    # None without a `run` record
    started: float | None = None
    last: float | None = None             # the latest time any of its records carries
    hangs: list[Any] = field(default_factory=list)     # `step` of each hang anomaly
    replays: list[Any] = field(default_factory=list)   # `step` of each replay record
    rewinds: list[tuple[Any, Any]] = field(default_factory=list)   # (step, to_step)

    def seen(self, time: Any) -> None:
        if _number(time) and (self.last is None or time > self.last):
            self.last = float(time)


@dataclass
class StepTimes:
    ends: array = field(default_factory=lambda: array("d"))       # each step record's `time`
    covered: array = field(default_factory=lambda: array("q"))    # its `steps_covered`
    skipped: set[int] = field(default_factory=set)    # indexes of withheld step records
    data_time_s: float = 0.0          # the sum of the finite `data_time_s` logged
    data_times: int = 0               # how many step records logged one
    segments: list[SegmentTimes] = field(default_factory=list)

    def add(self, batch: Batch, before: int, skipped: list[Any]) -> None:
        """A batch of records whose first step record has index ``before``; ``skipped``:
        its step records' ``skipped`` (the scan reads them already)."""
        if not self.segments and batch.steps:   # steps before any `run` record (in memory)
            opens = next((at for record, at in zip(batch.others, batch.others_at, strict=True)
                          if record.get(Common.KIND) == records.RUN), None)
            if opens != 0:
                self.segments.append(SegmentTimes(start=before))
        for record, at in zip(batch.others, batch.others_at, strict=True):
            self._other(record, before + at)
        if batch.steps:
            self._steps(batch.steps, before, skipped)
        if batch.hardware and self.segments:
            # a sample written after a later `run` record belongs to that segment; sample
            # times only ever matter at a segment's end, so the batch's last one is enough
            self.segments[-1].seen(field_values([batch.hardware[-1][1]], Common.TIME)[0])

    def _other(self, record: dict[str, Any], index: int) -> None:
        kind = record.get(Common.KIND)
        if kind == records.RUN:
            began = record.get(Common.TIME)
            self.segments.append(SegmentTimes(start=index,
                                              started=float(began) if _number(began) else None))
        elif not self.segments:
            self.segments.append(SegmentTimes(start=index))
        segment = self.segments[-1]
        segment.seen(record.get(Common.TIME))
        if kind == records.END:
            # its training began ``elapsed_s`` before it ended: the monitor's clock starts
            # when it is made, and its `run` record may wait for the first step
            elapsed, time = record.get(End.ELAPSED_S), record.get(Common.TIME)
            if _number(elapsed) and _number(time) and segment.started is not None:
                segment.started = min(segment.started, time - elapsed)
        if kind == records.ANOMALY and record.get(Anomaly.ANOMALY) == HANG:
            segment.hangs.append(record.get(Anomaly.STEP))
        elif kind == records.REPLAY:
            segment.replays.append(record.get(Replay.STEP))
        elif kind == records.REWIND:
            segment.rewinds.append((record.get(Rewind.STEP), record.get(Rewind.TO_STEP)))

    def _steps(self, steps: list[Any], before: int, skipped: list[Any]) -> None:
        # Numbers in C where the values are the usual ones (finite floats, ints >= 1): a
        # Python call per step would cost the summary a third of its scan.
        # (a non-finite time is as good as none: no interval compares with it)
        ends = _extended(self.ends, field_values(steps, Common.TIME),
                         lambda t: float(t) if _number(t) else math.nan, least=None)
        _extended(self.covered, field_values(steps, Step.STEPS_COVERED),
                  lambda c: c if type(c) is int and c > 0 else 1, least=1)
        self.skipped.update(compress(range(before, before + len(steps)), skipped))
        data = field_values(steps, Step.DATA_TIME_S)
        if data.count(None) < len(data):
            data = [t for t in data if t is not None]
            try:
                total = math.fsum(data)
            except TypeError:           # a string ("NaN") among them
                total = math.nan
            if not math.isfinite(total):
                data = [t for t in data if _number(t)]
                total = math.fsum(data)
            self.data_time_s += total
            self.data_times += len(data)
        # the segment a step record belongs to: the last one opened at or before it (a `run`
        # record inside this batch opened its segment already, in ``_other``)
        stop = before + len(steps)
        for segment in reversed(self.segments):
            first = max(segment.start, before)
            if first < stop:
                segment.seen(max(ends[first - before:stop - before]))
            if segment.start <= before:
                break
            stop = segment.start


def _extended(column: array, values: list[Any], clean: Callable[[Any], Any],
              least: float | None) -> list[Any]:
    """``values`` appended to ``column``, each through ``clean`` unless every one is a number
    of the column's type, at least ``least`` (checked in C; None: any); returns what was
    appended."""
    length = len(column)
    try:
        column.extend(values)
        if least is None or min(values) >= least:
            return values
    except (TypeError, OverflowError):
        pass
    del column[length:]             # a failed extend leaves the values before the bad one
    cleaned = list(map(clean, values))
    column.extend(cleaned)
    return cleaned


def _number(value: Any) -> TypeGuard[float]:
    return type(value) in (int, float) and math.isfinite(value)
