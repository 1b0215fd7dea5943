"""Carrying out what was found, on the training thread: the responder's actions (checkpoint,
report), the segment's stop request and anomaly list, one ``anomaly`` record each (the
findings of one ``act`` written together, so the console shows a step's anomalies as one
event the moment they are written), and the responder's own problems (a checkpoint that
could not be written) as notices.

Every part that finds something (the detectors through ``Monitor``, the peers, the hardware
sampler's findings held for the training thread) ends here, so what an anomaly does is
decided in one place."""
from __future__ import annotations

from typing import Any

from .. import records
from ..anomaly import Anomaly
from ..pipeline.segment import CurrentSegment
from ..pipeline.writer import RecordWriter
from ..records import Anomaly as AnomalyRecord
from ..records import Notice
from .responder import Responder


class Actions:
    def __init__(self, *, current: CurrentSegment, responder: Responder,
                 writer: RecordWriter):
        self._current, self._responder, self._writer = current, responder, writer

    def act(self, found: list[Anomaly]) -> None:
        """Respond to ``found`` (checkpoints, reports), then record each, all in one write;
        the first one that stops becomes the segment's stop request."""
        segment = self._current.segment
        self._responder.respond(found, segment.last_step)
        self.say_problems()
        for anomaly in found:
            if anomaly.stops and segment.stop_requested is None:
                segment.stop_requested = anomaly
            segment.anomalies.append(anomaly)
        self._writer.emit_many(records.ANOMALY, [_fields(anomaly) for anomaly in found])

    def take_pending(self) -> list[Anomaly]:
        """What the sampler thread found since the last step (it only holds them: a
        checkpoint must not race the optimizer update), each at the latest step when it
        has none; the caller acts on them (with the step's own findings: one event)."""
        segment = self._current.segment
        with self._writer.lock:
            found, segment.pending = segment.pending, []
        for anomaly in found:
            if anomaly.step is None:
                anomaly.step = segment.last_step or None
        return found

    def act_on_pending(self) -> list[Anomaly]:
        """Act on ``take_pending()``'s findings; returns them."""
        found = self.take_pending()
        self.act(found)
        return found

    def emit_anomaly(self, anomaly: Anomaly, **fields: Any) -> None:
        self._writer.emit(records.ANOMALY, {**_fields(anomaly), **fields})

    def notice(self, message: str, **fields: Any) -> None:
        self._writer.emit(records.NOTICE, {Notice.MESSAGE: message, **fields})

    def say_problems(self) -> None:
        for problem in self._responder.pop_problems():
            self.notice(problem)


def _fields(anomaly: Anomaly) -> dict[str, Any]:
    """The ``anomaly`` record's fields of a finding."""
    return {
        AnomalyRecord.ANOMALY: anomaly.kind, AnomalyRecord.STEP: anomaly.step,
        AnomalyRecord.VALUE: anomaly.value, AnomalyRecord.THRESHOLD: anomaly.threshold,
        AnomalyRecord.MESSAGE: anomaly.message, AnomalyRecord.ACTIONS: anomaly.actions,
        AnomalyRecord.CHECKPOINT: anomaly.checkpoint, AnomalyRecord.REPORT: anomaly.report,
        **({} if anomaly.layer is None else {AnomalyRecord.LAYER: anomaly.layer}),
        **_origin(anomaly), **anomaly.fields}


def _origin(anomaly: Anomaly) -> dict[str, Any]:
    if anomaly.origin_rank is None:
        return {}
    host, device = anomaly.origin_place or (None, None)
    return {AnomalyRecord.ORIGIN_RANK: anomaly.origin_rank, AnomalyRecord.ORIGIN_HOST: host,
            AnomalyRecord.ORIGIN_DEVICE: device}
