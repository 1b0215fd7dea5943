"""A training thread that stopped making progress: the watchdog thread notices, and this part
writes the ``hang`` anomaly with its report (every thread's stack) while the step is still
stuck, then, under ``on_anomaly={"hang": "abort"}``, ends the run log and the process."""
from __future__ import annotations

import os
import sys
from collections.abc import Callable, Mapping
from typing import Any

from .. import records
from ..anomaly import HANG, Anomaly
from ..basics.clock import Clock
from ..basics.run_dir import hang_report_stem
from ..decisions.actions import Actions
from ..decisions.hang_report import in_data_loader, thread_stacks, training_stack, where
from ..decisions.responder import Responder
from ..job.holders import DEVICE, HOST, RANK, Places
from ..job_schema import JobHang
from ..pipeline.segment import CurrentSegment
from ..pipeline.writer import RecordWriter
from ..policy import ABORT, ABORT_EXIT_STATUS, Policy
from ..records import Anomaly as AnomalyRecord
from ..records import End
from ..runlog.heartbeats import STARTUP_EXCHANGE
from .hang_answer import HangAnswer
from .heartbeat import Heartbeat, interval_for
from .watchdog import HangWatchdog, Stall


def _name_holder(anomaly: Anomaly, job: Mapping[str, Any]) -> None:
    """The job's answer in this rank's hang anomaly: its message, and the rank the job
    waits for as its origin when there is one."""
    anomaly.message += f"; {job[JobHang.MESSAGE]}"
    holders = job.get(JobHang.HOLDERS) or []
    if job.get(JobHang.HOLDER_COUNT) == 1 and holders:
        holder = holders[0]
        anomaly.origin_rank = holder[RANK]
        anomaly.origin_place = (holder[HOST], holder[DEVICE])


class HangGuard:
    """Owns the ``HangWatchdog`` (``timeout_s`` None: none runs); ``beat`` at each step end,
    ``progress`` for work that is no step (an evaluation batch). On several ranks,
    ``heartbeat`` says where this rank is, and ``answer`` gives the job's answer (which rank
    the job waits for) when this rank is the one to give it."""

    def __init__(self, *, timeout_s: float | None, clock: Clock, rank: int, policy: Policy,
                 current: CurrentSegment, responder: Responder, writer: RecordWriter,
                 actions: Actions, heartbeat: Heartbeat | None = None,
                 answer: HangAnswer | None = None,
                 end_job: Callable[[Mapping[str, Any]], None] | None = None):
        self._clock, self._rank, self._policy = clock, rank, policy
        self._current, self._responder = current, responder
        self._writer, self._actions = writer, actions
        self._heartbeat, self._answer = heartbeat, answer
        self._end_job = end_job         # the job log's end (rank 0's), on an abort
        self._watchdog = HangWatchdog(timeout_s=timeout_s, clock=clock, on_hang=self._on_hang)

    @classmethod
    def build(cls, *, world_size: int, log_dir: str, device: int | None,
              places: Callable[[], Places],
              write_job: Callable[[Mapping[str, Any]], None] | None,
              notice: Callable[[str], None], **guard: Any) -> HangGuard:
        """The guard, with a heartbeat and the job's answer when there are several ranks."""
        if world_size < 2:
            return cls(**guard)
        heartbeat = Heartbeat(log_dir=log_dir, rank=guard["rank"], device=device,
                              clock=guard["clock"], notice=notice,
                              interval_s=interval_for(guard["timeout_s"]))
        answer = HangAnswer(heartbeat=heartbeat, world_size=world_size, clock=guard["clock"],
                            places=places, write_job=write_job)
        heartbeat.start()
        return cls(**guard, heartbeat=heartbeat, answer=answer)

    def phase(self, phase: str, step: int) -> None:
        """Where the training thread is now (runlog/heartbeats.py's phases), for the
        heartbeat; nothing on a single rank."""
        if self._heartbeat is not None:
            self._heartbeat.phase(phase, step)
        watchdog = self._watchdog
        if phase == STARTUP_EXCHANGE:
            watchdog.exchanging = True
        elif watchdog.exchanging:       # out of it: the first step's allowance from now
            watchdog.exchanging = False
            watchdog.progress(self._clock.perf_counter())

    def ended(self, reason: str | None) -> None:
        """The segment ended (``reason``: its end record's): the last heartbeat."""
        if self._heartbeat is not None:
            self._heartbeat.ended(reason)

    def start(self, last_step: int) -> None:
        if self._heartbeat is not None:
            self._heartbeat.start()         # again, after a closed segment
        self._watchdog.start(last_step)

    def stop(self) -> None:
        self._watchdog.stop()

    def beat(self, now: float, step: int) -> None:
        self._watchdog.beat(now, step)
        if self._heartbeat is not None:
            self._heartbeat.resumed()

    def progress(self, now: float) -> None:
        self._watchdog.progress(now)

    def _on_hang(self, stall: Stall) -> None:
        """On the watchdog thread, while the training thread is stuck: the heartbeat says
        so, the job's answer when this rank gives it, then the ``hang`` record and its
        report through the writer's lock (as the sampler thread writes), then, under
        ``"abort"``, the ``end`` record and the exit (on a rank that did not answer, once
        the answer is on disk)."""
        threads = thread_stacks(stall.thread_id)     # before waiting for the lock
        stuck_in = where(threads)
        loader = in_data_loader(training_stack(threads))
        if self._heartbeat is not None:     # the report it will write, named now
            self._heartbeat.stalled(stuck_in, loader, hang_report_stem(
                self._heartbeat.log_dir, stall.step, self._rank) + ".json")
        answerer, job = self._answer.answer(step=stall.step, stalled_s=stall.stalled_s) \
            if self._answer is not None else (None, None)
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
            if job is not None:
                _name_holder(anomaly, job)
            anomaly.report = self._responder.hang_report(anomaly, threads, stuck_in)
            segment.anomalies.append(anomaly)
            fields: dict[str, Any] = {AnomalyRecord.WHERE: stuck_in}
            if answerer is not None:
                fields[AnomalyRecord.ANSWERED_BY] = answerer
            self._actions.emit_anomaly(anomaly, **fields)
            self._actions.say_problems()
            if ABORT in anomaly.actions:
                self._abort(anomaly, answered=job is not None,
                            since=self._clock.time() - stall.stalled_s)

    def _abort(self, anomaly: Anomaly, *, answered: bool, since: float) -> None:
        """The run log complete (the ``end`` record, every sink closed), then the process
        ends with ``ABORT_EXIT_STATUS``: ``os._exit``, because the stuck training thread
        would never let a normal exit finish. Called holding the writer's lock.

        On several ranks a launcher ends the job when its first rank exits: a rank that did
        not answer writes its end once the job's answer is on disk (``since``: the stall's
        start, Unix s), and every rank exits once the ranks the job does not wait for have
        ended too."""
        if self._answer is not None and not answered:
            self._answer.wait_for_answer(since)
        segment = self._current.segment
        segment.stop_requested = anomaly
        end = {End.REASON: records.ABORTED, End.STEPS: segment.last_step,
               End.ELAPSED_S: self._clock.perf_counter() - segment.start_perf,
               End.ERROR: None, End.STOPPED_BY: segment.stopped_by(self._rank)}
        self._writer.emit(records.END, end)
        segment.closed = True
        self._writer.close()
        if self._end_job is not None:
            self._end_job(end)
        if self._heartbeat is not None:
            self._heartbeat.ended(records.ABORTED)
        if self._answer is not None:
            self._answer.wait_for_ends(anomaly.threshold or 0.0)
        print(f"mindwatch [rank {self._rank}]: {anomaly.message}; exiting with status "
              f"{ABORT_EXIT_STATUS} (on_anomaly hang: abort)", file=sys.stderr, flush=True)
        os._exit(ABORT_EXIT_STATUS)
