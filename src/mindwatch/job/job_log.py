"""Rank 0's writer of ``job.jsonl`` (job_schema.py): the run's ranks, each step's spread,
each job-level event, the heatmap's bins, and the end with the job's goodput.

An event is written one step late (or at the end): what another rank finds after a step's
exchange (a straggler is judged from the exchanged data times, on the straggler itself)
reaches rank 0 in the next step's exchange. The job log is a view of the rank logs, never
the reason a run dies: a write that fails (a full disk) is said once and the rest of the
job log is given up, the rank logs go on.
"""
from __future__ import annotations

import os
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from .. import records
from ..anomaly import PEER_STOP, Anomaly
from ..basics.clock import Clock
from ..basics.rank_set import rank_set
from ..basics.run_dir import RunLogExists
from ..job_schema import HANG, JOB_FILE, JOB_RANKS, JOB_STEP, JobRun, JobStep, Place
from ..records import Common
from ..sinks.jsonl import JsonlSink
from . import fields as job_fields
from .events import Places, event
from .rank_bins import RankBins

if TYPE_CHECKING:
    import numpy as np


def job_log_path(log_dir: str) -> str:
    return os.path.join(log_dir, JOB_FILE)


def hosts_entry(places: Places) -> list[dict[str, Any]]:
    """``JobRun.HOSTS``: one entry per host, in order of its first rank."""
    grouped: dict[str | None, list[int]] = {}
    for rank in sorted(places):
        grouped.setdefault(places[rank][0], []).append(rank)
    return [{Place.HOST: host, Place.RANKS: rank_set(ranks),
             Place.DEVICES: [places[r][1] for r in ranks]} for host, ranks in grouped.items()]


class JobLog:
    def __init__(self, log_dir: str, *, clock: Clock, resume: bool,
                 notice: Callable[[str], None]):
        self.path = job_log_path(log_dir)
        if not resume and os.path.exists(self.path) and os.path.getsize(self.path) > 0:
            raise RunLogExists.at(self.path)
        self._clock, self._notice = clock, notice
        self._sink: JsonlSink | None = None
        self._places: Places = {}
        self._bins = RankBins()
        self._pending: tuple[int, dict[str, np.ndarray], list[Anomaly]] | None = None
        self._last_step: int | None = None
        self._slow: np.ndarray | None = None   # each rank's straggler cause, latest exchange
        # the hang watchdog's thread writes a ``hang`` record while the training thread
        # may come back and write its step
        self._lock = threading.Lock()

    def begin(self, run: Mapping[str, Any], places: Places, world_size: int) -> None:
        """A segment's start: the ``run`` record (rank 0's ``run`` fields, ``run``) with the
        ranks' hosts and devices."""
        self._places = places
        self._write(records.RUN, {**run, JobRun.WORLD_SIZE: world_size,
                                  JobRun.HOSTS: hosts_entry(places)})

    def step(self, step: int, rows: np.ndarray, own: Sequence[Anomaly],
             slow: np.ndarray | None = None) -> None:
        """After ``step``'s exchange: ``rows``, every rank's row (job/fields.py); ``own``,
        rank 0's anomalies of the step; ``slow``, the cause each rank is slow by now
        (ranks/consensus.py ``Exchange.slow``), for the stragglers of the pending event."""
        self._slow = slow
        self._flush_event(late=job_fields.late_kinds_of(rows))
        self._write(JOB_STEP, {JobStep.STEP: step, **job_fields.reduce(rows)})
        bin_record = self._bins.add(step, rows)
        if bin_record is not None:
            self._write(JOB_RANKS, bin_record)
        self._pending = (step, job_fields.kinds_of(rows), list(own))
        self._last_step = step

    def _flush_event(self, late: Mapping[str, np.ndarray] | None = None) -> None:
        if self._pending is None:
            return
        step, by_kind, own = self._pending
        self._pending = None
        if late:
            merged: dict[str, Any] = dict(by_kind)
            for kind, ranks in late.items():
                merged[kind] = sorted({*map(int, merged.get(kind, ())), *map(int, ranks)})
            by_kind = merged
        fields = event(step, by_kind, [a for a in own if a.step in (None, step)
                                       or a.kind == PEER_STOP], self._places, self._slow)
        if fields is not None:
            self._write("event", fields)

    def end(self, end: Mapping[str, Any], goodput: Mapping[str, Any] | None) -> None:
        """The segment's end: the pending event, the open bin, rank 0's ``end`` fields with
        the job's ``goodput``."""
        self._flush_event()
        if self._last_step is not None:
            bin_record = self._bins.flush(self._last_step)
            if bin_record is not None:
                self._write(JOB_RANKS, bin_record)
        self._write(records.END, {**end, "goodput": goodput})
        if self._sink is not None:
            sink, self._sink = self._sink, None
            self._guard(sink.close)

    def hang(self, fields: Mapping[str, Any]) -> None:
        """The job's answer to a hang (job/holders.py), from the hang watchdog's thread."""
        self._write(HANG, fields)

    def _write(self, kind: str, fields: Mapping[str, Any]) -> None:
        with self._lock:
            if self._sink is None and not self._guard(self._open):
                return
            assert self._sink is not None
            record = {Common.KIND: kind, Common.RANK: 0, Common.TIME: self._clock.time(),
                      **fields}
            self._guard(lambda: self._sink.write(record) if self._sink else None)

    def _open(self) -> None:
        self._sink = JsonlSink(self.path)

    def _guard(self, action: Callable[[], Any]) -> bool:
        if self.path == "":
            return False
        try:
            action()
            return True
        except OSError as exc:
            self._notice(f"the job log {self.path} cannot be written ({exc.strerror or exc}); "
                         "it stops here, the rank logs go on")
            self.path, self._sink = "", None
            return False
