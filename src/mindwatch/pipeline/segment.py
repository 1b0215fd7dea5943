"""One run segment's state: what ``Monitor.start`` replaces when a new segment begins.

A segment is one ``model.train`` call (or one custom loop from construction to ``close``).
Its stop request, anomalies, step counter and timers belong to it alone, so a second
``model.train`` after a stop starts clean. What spans segments on purpose (detector windows,
the smoothed loss, the responder's recent history) lives in the monitor.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .. import records
from ..anomaly import PEER_STOP, SIGNAL_STOP, SINK_ERROR, Anomaly
from ..records import StoppedBy


@dataclass
class RunSegment:
    start_perf: float                       # monotonic seconds when the segment's timing began
    last_perf: float                        # monotonic seconds at the latest step end
    started: bool = False                   # the ``run`` record is written
    # training began: the first snapshot taken, the ranks' exchange built (a notice before
    # the first step writes the run record but must not start a collective)
    training: bool = False
    unwatched: bool = False                 # said that it cannot be watched (Notice.UNWATCHED)
    closed: bool = False                    # the ``end`` record is written, sinks closed
    last_step: int = 0                      # global step of the latest observation
    observed: int = 0                       # step observations so far
    stop_requested: Anomaly | None = None   # the first anomaly (or request) that stops it
    anomalies: list[Anomaly] = field(default_factory=list)
    # Hardware findings from the sampler thread, acted on by the training thread.
    pending: list[Anomaly] = field(default_factory=list)
    signal: int | None = None               # the signal that stops it, once acted on
    sink_error: str | None = None           # the sink failure that stops it (on "raise")

    @classmethod
    def begin(cls, now: float) -> RunSegment:
        return cls(start_perf=now, last_perf=now)

    def end_reason(self, error: str | None) -> str:
        """The ``end`` record's reason: error, signal (ours or a peer's), stopped, completed."""
        stop = self.stop_requested
        if error or (stop is not None and stop.kind == SINK_ERROR):
            return records.ERROR
        if stop is None:
            return records.COMPLETED
        kind = stop.origin[1] if stop.kind == PEER_STOP and stop.origin else stop.kind
        return records.SIGNAL if kind == SIGNAL_STOP else records.STOPPED

    def stopped_by(self, own_rank: int) -> dict[str, Any] | None:
        """What stopped this segment, for the ``end`` record: the anomaly kind, the step and
        the rank where it was found (another rank's, for a ``peer_stop``) or that caused it
        (a gradient anomaly's origin rank)."""
        stop = self.stop_requested
        if stop is None:
            return None
        if stop.kind == PEER_STOP and stop.origin is not None:
            rank, kind = stop.origin
            return {StoppedBy.ANOMALY: kind, StoppedBy.STEP: stop.step, StoppedBy.RANK: rank}
        # a gradient anomaly every rank found alike (the reduced gradients) was caused by
        # the rank its attribution names (ranks/peers.py): that rank stopped the run
        return {StoppedBy.ANOMALY: stop.kind, StoppedBy.STEP: stop.step,
                StoppedBy.RANK: own_rank if stop.origin_rank is None else stop.origin_rank}


class CurrentSegment:
    """The segment the monitor's parts act on. ``Monitor.start`` replaces it with ``begin``;
    each part reads ``segment`` when it acts, so none keeps writing to one that has ended."""

    def __init__(self, now: float):
        self.segment = RunSegment.begin(now)

    def begin(self, now: float) -> RunSegment:
        self.segment = RunSegment.begin(now)
        return self.segment
