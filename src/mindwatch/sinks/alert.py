"""Alerts that reach people: the records that need someone (an anomaly whose actions go
beyond "warn", a ``hang``, an end other than ``completed``; on many ranks, a shared stop
from its finder only) POSTed to a webhook.

The training thread never waits on the network: ``write`` puts the alert on a bounded queue
that one daemon thread drains, POSTing each with a 5 s timeout; a full queue drops the alert
and counts it. A failing webhook (refused, timeout, HTTP 4xx/5xx) is said once, through
``pop_messages`` (the ``SinkSet`` turns it into a notice and a console line), and later
alerts are still tried. ``drain`` (before the run log closes) gives the thread up to
``DRAIN_S`` to deliver what is queued, the end alert above all, then gives up: a dead
webhook delays the end of a run by that much at most.
"""
from __future__ import annotations

import os
import socket
from collections.abc import Callable, Mapping
from typing import Any

from .. import records
from ..anomaly import HANG, PEER_STOP
from ..records import Anomaly, Common, End, StoppedBy
from .alert_body import alert_from_anomaly, alert_from_end, shaped
from .queued import QueuedSink
from .webhook import TIMEOUT_S, post_json, redacted_url

QUEUE_SIZE = 64          # alerts waiting; a webhook this far behind is not keeping up
DRAIN_S = 3.0            # the longest a closing run waits for its alerts


def wants_alert(record: Mapping[str, Any]) -> bool:
    """Whether ``record`` needs someone. On a run of many ranks, a stop that one rank decided
    is posted by that rank alone (its anomaly and its end): the ``peer_stop`` copies, the
    copies of a gradient anomaly that another rank's gradients caused (``origin_rank``) and
    the ends of the ranks that stopped with it would be one post per rank, a thousand for one
    event on a large job. Each rank still posts what happened to it (its own anomalies, its
    hang when no other rank answers for the job, its crash, a signal it received)."""
    kind = record.get(Common.KIND)
    if kind == records.ANOMALY:
        anomaly = record.get(Anomaly.ANOMALY)
        if anomaly == HANG:     # on several ranks, the job's answer alone is posted
            answered = record.get(Anomaly.ANSWERED_BY)
            return answered is None or answered == record.get(Common.RANK)
        origin = record.get(Anomaly.ORIGIN_RANK)
        # a gradient anomaly every rank found alike is posted by the rank that caused it
        if anomaly == PEER_STOP or (origin is not None and origin != record.get(Common.RANK)):
            return False
        actions = record.get(Anomaly.ACTIONS) or []
        # A hang is always worth waking someone for, even under "warn".
        return anomaly == HANG or any(a != "warn" for a in actions)
    if kind != records.END or record.get(End.REASON) == records.COMPLETED:
        return False
    stopped_by = record.get(End.STOPPED_BY)
    return not isinstance(stopped_by, Mapping) or \
        stopped_by.get(StoppedBy.RANK) == record.get(Common.RANK)


class AlertSink(QueuedSink):
    """Args: ``url`` (checked by the settings), ``alert_format`` (``ALERT_FORMATS``),
    ``log_dir`` and ``host`` for the alert's where; ``post`` sends one body (tests may
    replace it; it raises ``OSError`` when the service does not take the alert)."""

    UNIT, UNITS = "an alert", "alerts"

    def __init__(self, url: str, alert_format: str, *, log_dir: str, host: str | None = None,
                 post: Callable[[str, Any], Any] = post_json):
        shaped({}, alert_format)                    # an unknown format fails here
        super().__init__(queue_size=QUEUE_SIZE, drain_s=DRAIN_S,
                         thread_name="mindwatch-alerts")
        self.url, self.alert_format = url, alert_format
        self.run_dir = os.path.abspath(log_dir)
        self.host = host or socket.gethostname()
        self._post = post
        self._cause: Mapping[str, Any] | None = None   # the anomaly that stopped the run

    @property
    def name(self) -> str:
        return f"alert webhook {redacted_url(self.url)}"

    def write(self, record: Mapping[str, Any]) -> None:
        kind = record.get(Common.KIND)
        if kind == records.ANOMALY and "stop" in (record.get(Anomaly.ACTIONS) or []) \
                and self._cause is None:
            self._cause = record
        if not wants_alert(record):
            return
        if kind == records.END:
            alert = alert_from_end(record, run_dir=self.run_dir, host=self.host,
                                   cause=self._cause)
            self._cause = None                      # a next segment starts afresh
        else:
            alert = alert_from_anomaly(record, run_dir=self.run_dir, host=self.host)
        self.put(shaped(alert, self.alert_format))

    def deliver(self, record: Mapping[str, Any]) -> None:
        self._post(self.url, record)

    def drain_note(self) -> str:
        return f" (timeout {TIMEOUT_S:g} s each)"
