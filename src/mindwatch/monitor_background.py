"""What the monitor's background threads bring in: hardware samples (the sampler thread)
and hangs (the watchdog thread). Part of ``Monitor`` (a mixin): both threads write through
the writer's lock, and what needs the training thread (acting on a hardware anomaly) waits
for it in the segment's ``pending`` list."""
from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING, Any

from . import records
from .anomaly import HANG, Anomaly
from .hang_report import thread_stacks, where
from .observation import HardwareSample
from .policy import ABORT, ABORT_EXIT_STATUS
from .records import Anomaly as AnomalyRecord
from .records import End, Notice
from .watchdog import Stall

if TYPE_CHECKING:
    from collections.abc import Mapping

    from .clock import Clock
    from .detectors import Detector
    from .framework import FrameworkHooks
    from .policy import Policy
    from .responder import Responder
    from .segment import RunSegment
    from .settings import MonitorSettings
    from .watchdog import HangWatchdog
    from .writer import RecordWriter


class BackgroundInputs:
    """The hardware sampler's and the hang watchdog's side of ``Monitor``."""

    if TYPE_CHECKING:       # provided by Monitor
        settings: MonitorSettings
        framework: FrameworkHooks
        detectors: list[Detector]
        responder: Responder
        policy: Policy
        clock: Clock
        rank: int
        _segment: RunSegment
        _writer: RecordWriter
        _sampler: Any
        _watchdog: HangWatchdog

        def _ensure_started(self) -> None: ...
        def _act(self, found: list[Anomaly]) -> None: ...
        def _emit(self, kind: str, fields: Mapping[str, Any],
                  time: float | None = None) -> None: ...
        def _emit_anomaly(self, anomaly: Anomaly, **fields: Any) -> None: ...
        def _say_responder_problems(self) -> None: ...

    def _start_hardware(self) -> None:
        if self.settings.hardware_interval_s is None or self._sampler is not None:
            return
        from .hardware.sampler import HardwareSampler, default_probes
        self._sampler = HardwareSampler(
            interval_s=self.settings.hardware_interval_s, on_sample=self.submit_hardware,
            **default_probes(all_devices=self.settings.all_devices,
                             framework_reader=self.framework.memory_reader))

    def _stop_hardware(self) -> None:
        if self._sampler is not None:
            self._sampler.close()
            self._drain_sampler_messages()
            self._sampler = None

    def submit_hardware(self, sample: HardwareSample) -> None:
        """From the sampler thread: the ``hardware`` record is written now, so a hung step
        still leaves samples behind; what its detectors find waits for the training thread
        (the next ``observe``), since a checkpoint must not race the optimizer update."""
        with self._writer.lock:
            segment = self._segment
            if segment.closed or not segment.started:
                return
            record = sample.to_record()
            self.responder.remember_hardware(record)
            self._emit(records.HARDWARE, record, time=sample.time)
            for detector in self.detectors:
                segment.pending.extend(detector.update_hardware(sample))

    def observe_hardware(self, sample: HardwareSample) -> list[Anomaly]:
        """A hardware sample taken on the training thread (custom loops, tests)."""
        self._ensure_started()
        self.submit_hardware(sample)
        return self._act_on_pending()

    def _act_on_pending(self) -> list[Anomaly]:
        segment = self._segment
        with self._writer.lock:
            found, segment.pending = segment.pending, []
        for anomaly in found:
            if anomaly.step is None:
                anomaly.step = segment.last_step or None
        self._act(found)
        return found

    def _drain_sampler_messages(self) -> None:
        if self._sampler is not None:
            for message in self._sampler.pop_new_messages():
                self._emit(records.NOTICE, {Notice.MESSAGE: message,
                                            Notice.SOURCE: records.HARDWARE})

    def _on_hang(self, stall: Stall) -> None:
        """On the watchdog thread, while the training thread is stuck: the ``hang`` record
        and its report through the writer's lock (as the sampler thread writes), then, under
        ``"abort"``, the ``end`` record and the exit."""
        threads = thread_stacks(stall.thread_id)     # before waiting for the lock
        stuck_in = where(threads)
        with self._writer.lock:
            segment = self._segment
            # A step that ended, or a close that began, while the stacks were taken wins.
            if segment.closed or not segment.started or not self._watchdog.is_current(stall):
                return
            after = f"after step {stall.step}" if stall.step else "since training began"
            anomaly = Anomaly(
                HANG, stall.step or None, stall.stalled_s, stall.timeout_s,
                f"no step ended for {stall.stalled_s:.1f} s {after} (hang_timeout_s "
                f"{stall.timeout_s:g} s); the training thread waits in "
                f"{stuck_in or 'an unknown place'}", actions=self.policy.actions_for(HANG))
            anomaly.report = self.responder.hang_report(anomaly, threads, stuck_in)
            segment.anomalies.append(anomaly)
            self._emit_anomaly(anomaly, **{AnomalyRecord.WHERE: stuck_in})
            self._say_responder_problems()
            if ABORT in anomaly.actions:
                self._abort(anomaly)

    def _abort(self, anomaly: Anomaly) -> None:
        """The run log complete (the ``end`` record, every sink closed), then the process
        ends with ``ABORT_EXIT_STATUS``: ``os._exit``, because the stuck training thread
        would never let a normal exit finish. Called holding the writer's lock."""
        segment = self._segment
        segment.stop_requested = anomaly
        self._emit(records.END, {
            End.REASON: records.ABORTED, End.STEPS: segment.last_step,
            End.ELAPSED_S: self.clock.perf_counter() - segment.start_perf, End.ERROR: None,
            End.STOPPED_BY: segment.stopped_by(self.rank)})
        segment.closed = True
        self._writer.close()
        print(f"mindwatch [rank {self.rank}]: {anomaly.message}; exiting with status "
              f"{ABORT_EXIT_STATUS} (on_anomaly hang: abort)", file=sys.stderr, flush=True)
        os._exit(ABORT_EXIT_STATUS)
