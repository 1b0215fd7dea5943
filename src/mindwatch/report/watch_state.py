"""What the live view shows (``mindwatch watch``), folded from records: per rank the latest
``run`` record and the ``end`` of its latest segment, the latest step and hardware sample, the
recent losses, the latest state record (inside the model), the last anomalies as events
(one per step, ``mindwatch.events``) with their counts, and whether mindwatch could watch the
latest segment (report/watched.py).

Records come in two streams (``runlog.follower``): ``update`` gets each log's tail and then
what is appended to it, ``update_history`` what lies before the tail, read later. The view is
the history's fold followed by the tail's (``RankState.after``), which is what folding every
record in file order gives.
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Any

from .. import records
from ..events import Event, add, joined
from ..records import Common, Notice, Run, Step
from .watched import unwatched_fixes

SPARK_WIDTH = 16
LAST_ANOMALIES = 5          # events shown, each a step's anomalies


@dataclass
class RankState:
    rank: int
    run: dict[str, Any] | None = None
    step: dict[str, Any] | None = None
    hardware: dict[str, Any] | None = None
    state: dict[str, Any] | None = None
    end: dict[str, Any] | None = None
    losses: deque[float | None] = field(default_factory=lambda: deque(maxlen=SPARK_WIDTH))
    # the last events: one more than shown, as a last event a later record continues
    # counts once
    events: deque[Event] = field(default_factory=lambda: deque(maxlen=LAST_ANOMALIES + 1))
    anomaly_count: int = 0
    event_count: int = 0
    last_anomaly: dict[str, Any] | None = None
    # the latest segment's: its notices' fixes (Notice.UNWATCHED), its step records, and
    # whether one held a loss or a gradient norm
    unwatched: list[str] = field(default_factory=list)
    steps: int = 0
    measured: bool = False

    @property
    def fixes(self) -> list[str]:
        """What kept mindwatch from watching the latest segment (empty: it watched)."""
        return unwatched_fixes(self.unwatched, self.steps, self.measured)

    def fold(self, record: dict[str, Any]) -> None:
        kind = record.get(Common.KIND)
        if kind == records.RUN:
            self.run, self.end = record, None    # a new segment: running again
            self.unwatched, self.steps, self.measured = [], 0, False
        elif kind == records.STEP:
            self.step = record
            self.losses.append(record.get(Step.LOSS))
            self.steps += 1
            self.measured = self.measured or record.get(Step.LOSS) is not None \
                or record.get(Step.GRAD_NORM) is not None
        elif kind == records.NOTICE and record.get(Notice.UNWATCHED):
            self.unwatched.append(str(record[Notice.UNWATCHED]))
        elif kind == records.HARDWARE:
            self.hardware = record
        elif kind == records.STATE:
            self.state = record
        elif kind == records.ANOMALY:
            self.event_count += add(self.events, record)
            self.anomaly_count += 1
            self.last_anomaly = record
        elif kind == records.END:
            self.end = record

    def after(self, past: RankState) -> RankState:
        """This state folded after ``past``: what the records of both, in order, make."""
        both = RankState(self.rank, anomaly_count=past.anomaly_count + self.anomaly_count,
                         last_anomaly=self.last_anomaly or past.last_anomaly)
        both.run = self.run if self.run is not None else past.run
        both.end = self.end if self.run is not None or self.end is not None else past.end
        both.step = self.step if self.step is not None else past.step
        both.hardware = self.hardware if self.hardware is not None else past.hardware
        both.state = self.state if self.state is not None else past.state
        if self.run is not None:      # the latest segment began in the tail
            both.unwatched, both.steps, both.measured = \
                list(self.unwatched), self.steps, self.measured
        else:
            both.unwatched = [*past.unwatched, *self.unwatched]
            both.steps, both.measured = past.steps + self.steps, past.measured or self.measured
        both.losses.extend([*past.losses, *self.losses])
        events = joined(past.events, self.events)
        # the tail's first event continues the history's last one: one event, not two
        both.event_count = past.event_count + self.event_count - (
            len(past.events) + len(self.events) - len(events))
        both.events.extend(events)
        return both


class WatchState:
    """What the view shows, folded from records: those of ``update`` (the logs' tails, then
    what they append) after those of ``update_history`` (what lies before the tails, read
    later, ``Follower.read_history``)."""

    def __init__(self, run_dir: str):
        self.run_dir = run_dir
        self.exists = False
        self.skipped: dict[int, tuple[int, list[int]]] = {}    # Follower.skipped
        self.history_left = 0.0                                # Follower.history_left
        self._recent: dict[int, RankState] = {}
        self._past: dict[int, RankState] = {}

    def update(self, new: list[dict[str, Any]]) -> None:
        self._fold(self._recent, new)

    def update_history(self, old: list[dict[str, Any]]) -> None:
        self._fold(self._past, old)

    @staticmethod
    def _fold(states: dict[int, RankState], found: list[dict[str, Any]]) -> None:
        for record in found:
            rank = record[Common.RANK]
            state = states.get(rank)
            if state is None:
                state = states[rank] = RankState(rank)
            state.fold(record)

    @property
    def ranks(self) -> dict[int, RankState]:
        out = dict(self._past)
        for rank, recent in self._recent.items():
            past = self._past.get(rank)
            out[rank] = recent if past is None else recent.after(past)
        return out

    @property
    def world_size(self) -> int:
        ranks = self.ranks
        sizes = [s.run.get(Run.WORLD_SIZE) for s in ranks.values() if s.run]
        return max([len(ranks)] + [n for n in sizes if isinstance(n, int)])

    @property
    def all_ended(self) -> bool:
        """Every rank the run announced has logged an ``end`` record."""
        ranks = self.ranks
        return bool(ranks) and len(ranks) >= self.world_size and all(
            s.end is not None for s in ranks.values())


class JobState:
    """What the live view of a job shows, folded from its job log (``JobFollower``): the
    latest ``run`` record (the ranks' places), the latest job step with its spreads, the
    recent mean losses, the last events with their count, the latest segment's hangs and
    its end."""

    def __init__(self, run_dir: str):
        self.run_dir = run_dir
        self.run: dict[str, Any] | None = None
        self.places: dict[int, tuple[str | None, int | None]] = {}
        self.step: dict[str, Any] | None = None
        self.losses: deque[float | None] = deque(maxlen=SPARK_WIDTH)
        self.events: deque[dict[str, Any]] = deque(maxlen=LAST_ANOMALIES)
        self.event_count = 0
        self.hangs: list[dict[str, Any]] = []
        self.end: dict[str, Any] | None = None
        self.segments = 0
        self.skipped: tuple[int, list[int]] = (0, [])

    @property
    def world_size(self) -> int:
        size = (self.run or {}).get(Run.WORLD_SIZE)
        return size if isinstance(size, int) and size > 0 else max(len(self.places), 1)

    def update(self, found: list[dict[str, Any]]) -> None:
        from ..job_schema import EVENT, HANG, JOB_STEP
        from ..runlog.job.view import SEGMENT, places_of

        for record in found:
            kind = record.get(Common.KIND)
            if kind == records.RUN:
                self.run, self.places = record, places_of(record)
                self.segments += 1
                self.end, self.hangs = None, []
            elif kind == JOB_STEP:
                self.step = record
                self.losses.append(record.get(Step.LOSS))
            elif kind == EVENT:
                self.events.append({**record, SEGMENT: self.segments})
                self.event_count += 1
            elif kind == HANG:
                self.hangs.append(record)
            elif kind == records.END:
                self.end = record
