"""What an alert says: the ``Alert`` object (records.py) built from an ``anomaly`` or ``end``
record, and that object shaped for the service that receives it.

``json`` posts the object itself, for a service of one's own; the chat services get one
readable text of three lines (what and where, the message, the paths to open), because
their incoming webhooks accept text and show nothing of a JSON object.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .. import records
from ..events import detail
from ..records import Alert, Anomaly, Common, End, StoppedBy

JSON, SLACK, FEISHU, DINGTALK = "json", "slack", "feishu", "dingtalk"
ALERT_FORMATS = (JSON, SLACK, FEISHU, DINGTALK)
ANOMALY_EVENT, END_EVENT = records.ANOMALY, records.END


def alert_from_anomaly(record: Mapping[str, Any], *, run_dir: str, host: str
                       ) -> dict[str, Any]:
    """The alert of one anomaly record; its message ends with the replay's verdict when the
    step was computed again (``replay_verdict``), as the alert is read alone."""
    return {Alert.EVENT: ANOMALY_EVENT, Alert.RUN_DIR: run_dir, Alert.HOST: host,
            Alert.RANK: record.get(Common.RANK), Alert.TIME: record.get(Common.TIME),
            Alert.STEP: record.get(Anomaly.STEP), Alert.ANOMALY: record.get(Anomaly.ANOMALY),
            Alert.MESSAGE: detail(record.get(Anomaly.MESSAGE),
                                  record.get(Anomaly.REPLAY_VERDICT)),
            Alert.ACTIONS: list(record.get(Anomaly.ACTIONS) or []),
            Alert.REPORT: record.get(Anomaly.REPORT),
            Alert.CHECKPOINT: record.get(Anomaly.CHECKPOINT)}


def alert_from_end(record: Mapping[str, Any], *, run_dir: str, host: str,
                   cause: Mapping[str, Any] | None) -> dict[str, Any]:
    """``cause``: the anomaly record that stopped the run, if this rank logged one; its
    report and checkpoint are what the reader opens first."""
    reason, steps = record.get(End.REASON), record.get(End.STEPS)
    stopped_by = record.get(End.STOPPED_BY)
    kind = stopped_by.get(StoppedBy.ANOMALY) if isinstance(stopped_by, Mapping) else None
    message = f"training ended {reason} after step {steps}"
    if isinstance(stopped_by, Mapping):
        message += (f", stopped by {kind} at step {stopped_by.get(StoppedBy.STEP)} on rank "
                    f"{stopped_by.get(StoppedBy.RANK)}")
    if record.get(End.ERROR):
        message += f": {record[End.ERROR]}"
    cause = cause or {}
    return {Alert.EVENT: END_EVENT, Alert.RUN_DIR: run_dir, Alert.HOST: host,
            Alert.RANK: record.get(Common.RANK), Alert.TIME: record.get(Common.TIME),
            Alert.STEP: steps, Alert.ANOMALY: kind, Alert.MESSAGE: message,
            Alert.ACTIONS: list(cause.get(Anomaly.ACTIONS) or []),
            Alert.REPORT: cause.get(Anomaly.REPORT),
            Alert.CHECKPOINT: cause.get(Anomaly.CHECKPOINT), Alert.REASON: reason}


def alert_text(alert: Mapping[str, Any]) -> str:
    """Three lines: what and where, the message, the files to open."""
    where = f"rank {alert.get(Alert.RANK)} on {alert.get(Alert.HOST)}"
    if alert.get(Alert.EVENT) == END_EVENT:
        head = f"mindwatch: training ended {alert.get(Alert.REASON)} ({where})"
    else:
        head = (f"mindwatch: {alert.get(Alert.ANOMALY)} at step {alert.get(Alert.STEP)} "
                f"({where}; {'+'.join(alert.get(Alert.ACTIONS) or []) or 'warn'})")
    files = [f"run {alert.get(Alert.RUN_DIR)}"]
    files += [f"{name} {alert[name]}" for name in (Alert.REPORT, Alert.CHECKPOINT)
              if alert.get(name)]
    return "\n".join((head, str(alert.get(Alert.MESSAGE)), "; ".join(files)))


def shaped(alert: Mapping[str, Any], alert_format: str) -> dict[str, Any]:
    """The request body for ``alert_format`` (one of ``ALERT_FORMATS``)."""
    if alert_format == JSON:
        return records.to_strict(dict(alert))     # NaN values as the run log writes them
    text = alert_text(alert)
    if alert_format == SLACK:
        return {"text": text}
    if alert_format == FEISHU:
        return {"msg_type": "text", "content": {"text": text}}
    if alert_format == DINGTALK:
        return {"msgtype": "text", "text": {"content": text}}
    raise ValueError(f"alert_format must be one of {', '.join(map(repr, ALERT_FORMATS))}; "
                     f"got {alert_format!r}")
