"""A rank's log as the views use it: one pass over the records into columns, keeping only the
few records the views show whole.

``RankScan`` holds the step fields of ``fast.STEP_FIELDS`` as columns (``columns.py``), the
hardware samples as short columns placed on the step axis, the ``state`` records as columns
(``states.py``; only where the reader keeps them, and counted everywhere), every ``anomaly``
and ``rewind`` record, the latest ``run`` record, the ``end`` record of the latest segment,
the count of withheld updates, and each run segment's share of these (``segments.py``),
found in the same pass. ``summary`` and ``report`` read nothing else, so a long run costs
them its columns (~60 bytes a step), not a dict per record (~1.5 KB a step). A scan for
``summary`` (``charts=False``) leaves out what only the report's charts draw: the columns
of ``CHART_FIELDS`` and the hardware samples.
"""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from operator import truth
from typing import Any

from .. import records
from ..records import Common, Device, Hardware, Notice, State, Step, device_label
from .batch import Batch
from .columns import FLOAT, INT, Column, Columns, field_values, revived
from .fast import DEVICE_FIELDS, HOST_FIELDS, STEP_FIELDS
from .lines import Record
from .segments import Segment, figures
from .states import StateColumns
from .step_times import StepTimes
from .steps import StepIndex

X = "x"             # a hardware series' step positions, beside its field columns
TYPE = Device.TYPE
# Step fields whose median (one value per step, finite ones) ``summary`` quotes per rank.
MEDIAN_FIELDS = (Step.TOKENS_PER_S, Step.MFU)
# Step fields that only the report's charts read (not summary's figures).
CHART_FIELDS = (Step.LR, Step.GRAD_NORM, Step.SAMPLES_PER_S)


def _typecodes(charts: bool) -> dict[str, str]:
    return {name: INT if name == Step.STEP else FLOAT for name in STEP_FIELDS
            if charts or name not in CHART_FIELDS}


@dataclass
class RankScan:
    steps: dict[str, Column]                   # STEP_FIELDS -> one value per step record
    hardware: dict[str, list[Any]]             # X and HOST_FIELDS -> one per sample
    devices: dict[str, dict[str, list[Any]]]   # "npu0" -> X and DEVICE_FIELDS
    # (steps: without CHART_FIELDS, hardware and devices: empty, in a scan without charts)
    anomalies: list[Record] = field(default_factory=list)
    rewinds: list[Record] = field(default_factory=list)
    run: Record | None = None                  # the latest `run` record
    end: Record | None = None                  # the `end` of the latest segment, if any
    skipped_steps: int = 0                     # step records with a truthy `skipped`
    ascending: bool = True                     # every step is larger than the one before
    # The median of the step times (s), one per step (its last record), None left out;
    # None when there is none. Here, not in summary.py, so that each worker sorts its own.
    step_time_median: float | None = None
    medians: dict[str, float | None] = field(default_factory=dict)     # of MEDIAN_FIELDS
    states: StateColumns = field(default_factory=StateColumns)          # `state` records
    # The state records with a step (those ``states`` holds when kept), kept or not.
    state_count: int = 0
    # In file order, at least one once finished; the last is the latest segment.
    segments: list[Segment] = field(default_factory=list)
    times: StepTimes = field(default_factory=StepTimes)    # where the time went: goodput.py

    @property
    def step_count(self) -> int:
        return len(self.steps[Step.STEP])


class Scanner:
    """Folds batches of records (``batch.Batch``), in file order, into a ``RankScan``.
    ``states``: keep the ``state`` records as columns (else only count them); ``charts``:
    keep what only the report's charts draw (module docstring)."""

    def __init__(self, *, states: bool = True, charts: bool = True) -> None:
        self._keep_states, self._charts = states, charts
        self._columns = Columns(_typecodes(charts))
        self._count = 0
        self.scan = RankScan(steps=self._columns.data, devices={},
                             hardware={name: [] for name in (X, *HOST_FIELDS)})

    def add(self, batch: Batch) -> None:
        scan = self.scan
        skipped: list[Any] = []
        measured: tuple[list[Any], ...] = ()
        if batch.steps:
            self._columns.extend(batch.steps)
            skipped = field_values(batch.steps, Step.SKIPPED)
            measured = tuple(field_values(batch.steps, name)
                             for name in (Step.LOSS, Step.GRAD_NORM))
        if self._charts and batch.hardware:
            self._place(batch.hardware)
        done = 0                 # the batch's steps counted into a segment's withheld updates
        for record, before in zip(batch.others, batch.others_at, strict=True):
            kind = record.get(Common.KIND)
            if kind == records.ANOMALY:
                scan.anomalies.append(record)
                self._segment().anomalies.append(record)
            elif kind == records.REWIND:
                scan.rewinds.append(record)
                self._segment().rewinds.append(record)
            elif kind == records.RUN:
                scan.run, scan.end = record, None      # a new segment: no end yet
                if scan.segments or self._count + before:    # the steps before it end one
                    self._count_skipped(skipped[done:before])
                    self._count_measured([column[done:before] for column in measured])
                    done = before
                scan.segments.append(Segment(start=self._count + before))
            elif kind == records.END:
                scan.end = self._segment().end = record
            elif kind == records.NOTICE and record.get(Notice.UNWATCHED):
                self._segment().unwatched.append(str(record[Notice.UNWATCHED]))
        for item in batch.states:
            step = item.get(State.STEP) if type(item) is dict else item.step
            if type(step) is int:               # what StateColumns.add takes
                scan.state_count += 1
                if self._keep_states:
                    scan.states.add(item)
        if self._keep_states:
            scan.states.flush()                 # a chunk's rows, cut into the columns now
        if skipped:
            self._count_skipped(skipped[done:] if done else skipped)
            self._count_measured([column[done:] if done else column for column in measured])
        if batch.steps:
            self._first_covered(batch.steps)
        scan.times.add(batch, self._count, skipped)
        self._count += len(batch.steps)

    def _place(self, hardware: list[tuple[int, Any]]) -> None:
        """A batch's hardware samples into the scan's series, each at the step logged last
        before it (0 before the first step), so that every panel shares the step axis. Now,
        not at the end: a sample's record then never outlives its chunk (a run's thousands
        of small records, kept to the end, pinned the memory of every chunk)."""
        scan, steps = self.scan, self._columns.data[Step.STEP]
        items = [item for _, item in hardware]
        xs = [steps[self._count + before - 1] if self._count + before else 0
              for before, _ in hardware]
        scan.hardware[X] += xs
        for name in HOST_FIELDS:
            scan.hardware[name] += revived(field_values(items, name), name)[0]
        # ``devices`` that is not a list, or an entry that is not an object, holds nothing
        # to draw (records.problems accepts them: it checks a list's objects only).
        placed = [(x, device) for x, found in zip(xs, field_values(items, Hardware.DEVICES),
                                                  strict=True) if isinstance(found, list)
                  for device in found if type(device) is dict or hasattr(device, TYPE)]
        by_label: dict[str, list[tuple[Any, Any]]] = {}
        for x, device in placed:
            by_label.setdefault(device_label(device), []).append((x, device))
        for label, pairs in by_label.items():
            devices = [device for _, device in pairs]
            series = scan.devices.setdefault(label, {name: [] for name in (X, *DEVICE_FIELDS)})
            series[X] += [x for x, _ in pairs]
            for name in DEVICE_FIELDS:
                series[name] += revived(field_values(devices, name), name)[0]

    def _segment(self) -> Segment:
        """The segment being read; one from the first step when no ``run`` record opened one
        (records given in memory)."""
        if not self.scan.segments:
            self.scan.segments.append(Segment(start=0))
        return self.scan.segments[-1]

    def _count_skipped(self, values: list[Any]) -> None:
        count = sum(map(truth, values))
        self.scan.skipped_steps += count
        self._segment().skipped_steps += count

    def _count_measured(self, columns: list[list[Any]]) -> None:
        """Whether the segment's steps (these columns of a batch: the losses, the norms)
        hold a value; counted in C, since a run that logs them has no None to find."""
        segment = self._segment()
        if not segment.measured:
            segment.measured = any(column.count(None) < len(column) for column in columns)

    def _first_covered(self, steps: list[Any]) -> None:
        """The ``steps_covered`` of each segment's first step record, for the segments whose
        first step record is in this batch's ``steps`` (segments.py: a segment's own steps)."""
        self._segment()                         # steps before any `run` record: one of them
        end = self._count + len(steps)
        for segment in reversed(self.scan.segments):
            if segment.start < self._count:
                break
            if segment.start < end:
                covered = field_values([steps[segment.start - self._count]],
                                       Step.STEPS_COVERED)[0]
                if type(covered) is int and covered > 0:
                    segment.first_covered = covered

    def add_records(self, found: list[Record]) -> None:
        batch = Batch()
        for record in found:
            batch.add(record)
        self.add(batch)

    def finish(self) -> RankScan:
        """The step axis's figures: segments' bounds, medians."""
        scan = self.scan
        scan.steps = self._columns.data
        self._segment()
        figures(scan.segments, scan.steps)
        steps = scan.steps[Step.STEP]
        index = StepIndex(steps)
        scan.ascending = index.ascending
        times = index.values(scan.steps[Step.STEP_TIME_S])
        scan.step_time_median = statistics.median(times) if len(times) else None
        for name in MEDIAN_FIELDS:
            finite = [v for v in index.values(scan.steps[name])
                      if type(v) in (int, float) and math.isfinite(v)]
            scan.medians[name] = statistics.median(finite) if finite else None
        return scan


def scan_records(found: list[Record]) -> RankScan:
    """The scan of records already in memory (``RankLog`` built from a list)."""
    scanner = Scanner()
    scanner.add_records(found)
    return scanner.finish()
