"""What every tracker sink shares: the run log's records turned into one tracker run per run
segment, its metrics at the run log's steps, its events and its end. A tracker implements the
five calls at the bottom (``start``, ``log``, ``event``, ``end``, and ``flush`` where it
batches); this class decides what each record becomes, so the three trackers show the same
numbers under the same names:

- a ``step`` record: its scalars under the run log's names (``loss``, ``lr``, ``grad_norm``,
  ``step_time_s``, ...), ``skipped`` (1 for a withheld step) and ``lr_group<i>``;
- ``state``, ``hardware``, ``epoch`` and ``anomaly`` records: the names TensorBoard shows
  (``sinks/scalars.py``): ``state/weight_norm``, one chart group per quantity with a line per
  layer (``state_update_ratio/<layer>``, ``activation_max_logit/<cell>``), ``hardware/...``
  (less what the tracker charts itself, ``HARDWARE_CHARTS``), ``anomalies/<kind>`` (their
  running count: a step on the chart where each was found);
- every ``anomaly``: an ``event`` too (the tracker's own kind of alert, tag or table row);
- the run's end (at ``close``, once the end record and the job log are written): the end
  reason's outcome (``finished``, ``killed`` for a stop or a signal, ``failed``: a stopped run
  does not end as a finished one), ``mindwatch summary``'s verdict, the HTML report and the
  anomaly reports (``closing.py``)."""
from __future__ import annotations

import math
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .. import records
from ..basics.numbers import to_number
from ..records import Common, End, Step
from ..sinks.queued import QueuedSink
from ..sinks.scalars import HARDWARE, ScalarView

SCALARS = (Step.LOSS, Step.LOSS_SMOOTH, Step.LR, Step.GRAD_NORM, Step.STEP_TIME_S,
           Step.SAMPLES_PER_S, Step.TOKENS_PER_S, Step.MFU, Step.ETA_S, Step.DATA_TIME_S,
           Step.LOSS_SCALE, Step.LOCAL_GRAD_NORM)
FINISHED, KILLED, FAILED = "finished", "killed", "failed"
OUTCOMES = {records.COMPLETED: FINISHED, records.STOPPED: KILLED, records.SIGNAL: KILLED,
            records.ERROR: FAILED, records.ABORTED: FAILED}
HOST = "host"            # HARDWARE_CHARTS' name for the host's own fields (CPU, memory)
QUEUE_SIZE = 10_000      # records waiting (~an hour of steps at 3 steps/s)
DRAIN_S = 10.0           # the longest a closing run waits for its tracker


@dataclass
class RunEnd:
    """What ``end`` receives: the end reason (None: no end record), its outcome, the verdict,
    the anomalies (their run log lines), and the files to attach."""
    reason: str | None
    outcome: str
    verdict: str
    anomalies: list[str]
    report: str | None                   # the HTML page
    reports_dir: str | None              # the anomaly reports' directory, when it has any
    problem: str | None = None           # why the page could not be made


class TrackerSink(QueuedSink):
    """``HARDWARE_CHARTS``: what the tracker charts itself (``HOST``, ``"gpu"``, ``"npu"``),
    left out of its ``hardware/...`` metrics."""

    UNIT, UNITS = "a record", "records"
    HARDWARE_CHARTS: frozenset[str] = frozenset()

    def __init__(self, options: Mapping[str, Any], *, log_dir: str, rank: int, thread_name: str,
                 queue_size: int = QUEUE_SIZE, drain_s: float = DRAIN_S):
        super().__init__(queue_size=queue_size, drain_s=drain_s, thread_name=thread_name)
        self.log_dir, self.rank = log_dir, rank
        name = options.get("run_name") or os.path.basename(os.path.abspath(log_dir))
        self.run_name = f"{name}-rank{rank}" if rank else str(name)
        self.started = False
        self._view = ScalarView()
        self._anomalies: list[str] = []
        self._end: Mapping[str, Any] | None = None

    # -- the records ----------------------------------------------------------------------
    def deliver(self, record: Mapping[str, Any]) -> None:
        kind = record.get(Common.KIND)
        if kind == records.RUN:
            if self.started:
                self._close_run()
            self._view, self._anomalies, self._end = ScalarView(), [], None
            self.start(record)
            self.started = True
            return
        if not self.started:
            return
        if kind == records.END:
            self._end = record          # closed at ``finish``, once the job log has its end
            return
        if kind == records.STEP:
            step = int(record[Step.STEP])
            self._view.point(record)    # the latest step, where hardware records are placed
            self.log(step, _step_metrics(record), _time(record))
            return
        point = self._view.point(record)
        if point is None:
            return
        metrics = {name: value for name, value in point.scalars if self._keeps(name)}
        if kind == records.ANOMALY:
            self.flush()                # the steps before it are there when it is
            self._anomalies.append(records.encode(record))   # as the run log writes it
            if metrics:
                self.log(point.step, metrics, point.wall_time)
            self.event(record)
            return
        if metrics:
            self.log(point.step, metrics, point.wall_time)

    def finish(self) -> None:
        if self.started:
            self._close_run()

    def _close_run(self) -> None:
        from .closing import closing

        self.flush()
        reason = self._end.get(End.REASON) if self._end else None
        count = len(self._anomalies)
        own = ", ".join(([f"{count} {'ANOMALY' if count == 1 else 'ANOMALIES'}"] if count else [])
                        + [str(reason).upper() if reason else "NO END RECORD"])
        ending = closing(self.log_dir, own)
        reports = os.path.join(self.log_dir, "anomalies")
        self.end(RunEnd(reason=None if reason is None else str(reason),
                        outcome=OUTCOMES.get(str(reason), FAILED), verdict=ending.verdict,
                        anomalies=list(self._anomalies), report=ending.report,
                        reports_dir=reports if os.path.isdir(reports) and os.listdir(reports)
                        else None, problem=ending.problem))
        self.started, self._end = False, None

    def _keeps(self, name: str) -> bool:
        """Leaves out the hardware the tracker charts itself: the host's fields
        (``hardware/cpu_percent``) under ``HOST``, a device's (``hardware/npu0/temp_c``)
        under its type."""
        parts = name.split("/")
        if parts[0] != HARDWARE or not self.HARDWARE_CHARTS:
            return True
        charted = HOST if len(parts) == 2 else parts[1].rstrip("0123456789")
        return charted not in self.HARDWARE_CHARTS

    # -- what a tracker implements ---------------------------------------------------------
    def start(self, record: Mapping[str, Any]) -> None:
        """A new tracker run for the ``run`` record (its settings: ``config``, versions)."""
        raise NotImplementedError

    def log(self, step: int, metrics: dict[str, float], wall_time: float) -> None:
        """Metrics at the run log's ``step``; non-finite values included (a tracker that
        refuses them leaves them out)."""
        raise NotImplementedError

    def flush(self) -> None:
        """Send what ``log`` batched (before an event, and at the end)."""

    def event(self, record: Mapping[str, Any]) -> None:
        """One anomaly, as the tracker shows an event."""
        raise NotImplementedError

    def end(self, run_end: RunEnd) -> None:
        """The run's end: its outcome, verdict and files; the tracker run is closed after."""
        raise NotImplementedError


def _step_metrics(record: Mapping[str, Any]) -> dict[str, float]:
    metrics = {}
    for name in SCALARS:
        value = to_number(record.get(name))
        if value is not None:
            metrics[name] = value
    for group, value in enumerate(record.get(Step.LR_GROUPS) or []):
        number = to_number(value)
        if number is not None:
            metrics[f"lr_group{group}"] = number
    metrics[Step.SKIPPED] = 1.0 if record.get(Step.SKIPPED) is True else 0.0
    return metrics


def _time(record: Mapping[str, Any]) -> float:
    value = to_number(record.get(Common.TIME))
    return value if value is not None and math.isfinite(value) else time.time()
