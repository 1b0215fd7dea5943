"""Hardware samples coming in: the sampler thread's, and those a loop takes itself.

The ``hardware`` record is written as the sample arrives, under the writer's lock, so a hung
step still leaves samples behind; what the detectors find in it waits in the segment's
``pending`` list for the training thread, where ``Actions`` carries it out."""
from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from .. import records
from ..anomaly import Anomaly
from ..decisions.actions import Actions
from ..decisions.responder import Responder
from ..detectors import Detector
from ..observation import HardwareSample
from ..pipeline.segment import CurrentSegment
from ..pipeline.writer import RecordWriter
from ..records import Notice


class HardwareInput:
    """Owns the sampler thread between ``start`` and ``stop``.

    Args:
        interval_s: seconds between samples; None: no sampler thread.
        all_devices: sample every device of the host, not only this rank's.
        memory_reader: the framework's device-memory reader (``FrameworkHooks``).
    """

    def __init__(self, *, interval_s: float | None, all_devices: bool,
                 memory_reader: Callable[[], Any] | None, detectors: Sequence[Detector],
                 current: CurrentSegment, responder: Responder, writer: RecordWriter,
                 actions: Actions):
        self._interval_s, self._all_devices = interval_s, all_devices
        self._memory_reader, self._detectors = memory_reader, detectors
        self._current, self._responder = current, responder
        self._writer, self._actions = writer, actions
        self.sampler: Any = None

    def start(self) -> None:
        """Build the sampler thread (its probes say now what they cannot read)."""
        if self._interval_s is None or self.sampler is not None:
            return
        from ..hardware.sampler import HardwareSampler, default_probes
        self.sampler = HardwareSampler(
            interval_s=self._interval_s, on_sample=self.submit,
            **default_probes(all_devices=self._all_devices,
                             framework_reader=self._memory_reader))

    def run(self) -> None:
        if self.sampler is not None:
            self.sampler.start()

    def stop(self) -> None:
        if self.sampler is not None:
            self.sampler.close()
            self.drain_messages()
            self.sampler = None

    def submit(self, sample: HardwareSample) -> None:
        """From the sampler thread (or any thread): record now, detect, hold the findings."""
        with self._writer.lock:
            segment = self._current.segment
            if segment.closed or not segment.started:
                return
            if sample.segment_steps is None:
                sample.segment_steps = segment.observed
            record = sample.to_record()
            self._responder.remember_hardware(record)
            self._writer.emit(records.HARDWARE, record, time=sample.time)
            for detector in self._detectors:
                segment.pending.extend(detector.update_hardware(sample))

    def observe(self, sample: HardwareSample) -> list[Anomaly]:
        """A sample taken on the training thread: recorded and acted on at once."""
        self.submit(sample)
        return self._actions.act_on_pending()

    def drain_messages(self) -> None:
        """What the probes said on the sampler thread (a tool missing, a probe failing),
        as ``notice`` records from the training thread."""
        if self.sampler is not None:
            for message in self.sampler.pop_new_messages():
                self._writer.emit(records.NOTICE, {Notice.MESSAGE: message,
                                                   Notice.SOURCE: records.HARDWARE})
