"""A training thread that stopped making progress: the watchdog thread notices, and this part
writes the ``hang`` anomaly with its report (every thread's stack) while the step is still
stuck, then, under ``on_anomaly={"hang": "abort"}``, ends the run log and the process."""
from __future__ import annotations

import os
import sys

from .. import records
from ..anomaly import HANG, Anomaly
from ..basics.clock import Clock
from ..decisions.actions import Actions
from ..decisions.hang_report import thread_stacks, where
from ..decisions.responder import Responder
from ..pipeline.segment import CurrentSegment
from ..pipeline.writer import RecordWriter
from ..policy import ABORT, ABORT_EXIT_STATUS, Policy
from ..records import Anomaly as AnomalyRecord
from ..records import End
from .watchdog import HangWatchdog, Stall


class HangGuard:
    """Owns the ``HangWatchdog`` (``timeout_s`` None: none runs); ``beat`` at each step end,
    ``progress`` for work that is no step (an evaluation batch)."""

    def __init__(self, *, timeout_s: float | None, clock: Clock, rank: int, policy: Policy,
                 current: CurrentSegment, responder: Responder, writer: RecordWriter,
                 actions: Actions):
        self._clock, self._rank, self._policy = clock, rank, policy
        self._current, self._responder = current, responder
        self._writer, self._actions = writer, actions
        self._watchdog = HangWatchdog(timeout_s=timeout_s, clock=clock, on_hang=self._on_hang)

    def start(self, last_step: int) -> None:
        self._watchdog.start(last_step)

    def stop(self) -> None:
        self._watchdog.stop()

    def beat(self, now: float, step: int) -> None:
        self._watchdog.beat(now, step)

    def progress(self, now: float) -> None:
        self._watchdog.progress(now)

    def _on_hang(self, stall: Stall) -> None:
        """On the watchdog thread, while the training thread is stuck: the ``hang`` record
        and its report through the writer's lock (as the sampler thread writes), then, under
        ``"abort"``, the ``end`` record and the exit."""
        threads = thread_stacks(stall.thread_id)     # before waiting for the lock
        stuck_in = where(threads)
        with self._writer.lock:
            segment = self._current.segment
            # A step that ended, or a close that began, while the stacks were taken wins.
            if segment.closed or not segment.started or not self._watchdog.is_current(stall):
                return
            after = f"after step {stall.step}" if stall.step else "since training began"
            anomaly = Anomaly(
                HANG, stall.step or None, stall.stalled_s, stall.timeout_s,
                f"no step ended for {stall.stalled_s:.1f} s {after} (hang_timeout_s "
                f"{stall.timeout_s:g} s); the training thread waits in "
                f"{stuck_in or 'an unknown place'}", actions=self._policy.actions_for(HANG))
            anomaly.report = self._responder.hang_report(anomaly, threads, stuck_in)
            segment.anomalies.append(anomaly)
            self._actions.emit_anomaly(anomaly, **{AnomalyRecord.WHERE: stuck_in})
            self._actions.say_problems()
            if ABORT in anomaly.actions:
                self._abort(anomaly)

    def _abort(self, anomaly: Anomaly) -> None:
        """The run log complete (the ``end`` record, every sink closed), then the process
        ends with ``ABORT_EXIT_STATUS``: ``os._exit``, because the stuck training thread
        would never let a normal exit finish. Called holding the writer's lock."""
        segment = self._current.segment
        segment.stop_requested = anomaly
        self._writer.emit(records.END, {
            End.REASON: records.ABORTED, End.STEPS: segment.last_step,
            End.ELAPSED_S: self._clock.perf_counter() - segment.start_perf, End.ERROR: None,
            End.STOPPED_BY: segment.stopped_by(self._rank)})
        segment.closed = True
        self._writer.close()
        print(f"mindwatch [rank {self._rank}]: {anomaly.message}; exiting with status "
              f"{ABORT_EXIT_STATUS} (on_anomaly hang: abort)", file=sys.stderr, flush=True)
        os._exit(ABORT_EXIT_STATUS)
