"""TensorBoard view of the run: scalars and anomaly notes in ``<log_dir>/tensorboard/rank_<R>/``.

The record -> named-scalar mapping (``ScalarView``) lives here and is shared with the
MindInsight sink, so both dashboards show the same numbers under the same names. Names carry
their unit where there is one (``time/step_time_s``, ``hardware/mem_used_gb``, ...).
"""
from __future__ import annotations

import math
import os
import threading
import time
from collections import Counter
from typing import Any, List, Mapping, NamedTuple, Optional, Tuple

from .. import format as fmt
from .. import records
from .base import Sink

# (record field, scalar name) per record kind; a missing or null field is skipped.
STEP_SCALARS = (
    ("loss", "train/loss"), ("loss_smooth", "train/loss_smooth"), ("lr", "train/lr"),
    ("grad_norm", "train/grad_norm"), ("loss_scale", "train/loss_scale"),
    ("step_time_s", "time/step_time_s"), ("samples_per_s", "time/samples_per_s"),
)
EPOCH_SCALARS = (
    ("loss_mean", "epoch/loss_mean"), ("loss_change", "epoch/loss_change"),
    ("nonfinite_losses", "epoch/nonfinite_losses"),
)
HARDWARE_SCALARS = (
    ("cpu_percent", "hardware/cpu_percent"), ("mem_used_gb", "hardware/mem_used_gb"),
    ("mem_available_gb", "hardware/mem_available_gb"), ("rss_gb", "hardware/rss_gb"),
)
# Per device, under hardware/<type><index>/ (e.g. hardware/npu0/temp_c).
DEVICE_FIELDS = ("util_percent", "mem_used_mb", "temp_c", "power_w")

def number(value: Any) -> Optional[float]:
    """The value as a float (non-finite kept as-is), or None when it is not a number.

    Bools are not numbers here (``skipped`` is mapped explicitly). The run log's strings
    "NaN"/"Infinity"/"-Infinity" are accepted so that a record read back from a file maps
    exactly like one fresh from the monitor."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, str):
        return records.NONFINITE_TEXT.get(value)
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


class Point(NamedTuple):
    step: int                              # global step the values belong to
    wall_time: float                       # Unix seconds
    scalars: List[Tuple[str, float]]       # (name, value), non-finite values included
    anomaly: Optional[Mapping[str, Any]]   # the record itself, for anomaly records


class ScalarView:
    """Turns records into named scalars at a global step. Stateful: records without a step
    (hardware, epoch) are placed at the latest step seen (0 before the first step), and each
    anomaly adds ``anomalies/<kind>``, the running count of that kind (unit: anomalies)."""

    def __init__(self) -> None:
        self.last_step = 0
        self._anomaly_counts: Counter = Counter()

    def point(self, record: Mapping[str, Any]) -> Optional[Point]:
        kind = record.get("kind")
        step = record.get("step")
        if isinstance(step, int) and not isinstance(step, bool):
            if kind == records.STEP:
                self.last_step = max(self.last_step, step)
        else:
            step = self.last_step
        wall = number(record.get("time"))
        wall = time.time() if wall is None or not math.isfinite(wall) else wall
        scalars: List[Tuple[str, float]] = []
        anomaly = None
        if kind == records.STEP:
            scalars += self._fields(record, STEP_SCALARS)
            for group, value in enumerate(record.get("lr_groups") or []):
                if number(value) is not None:
                    scalars.append((f"train/lr_group{group}", number(value)))
            if isinstance(record.get("skipped"), bool):
                scalars.append(("train/skipped", 1.0 if record["skipped"] else 0.0))
        elif kind == records.EPOCH:
            scalars += self._fields(record, EPOCH_SCALARS)
        elif kind == records.HARDWARE:
            scalars += self._fields(record, HARDWARE_SCALARS)
            for device in record.get("devices") or []:
                index = device.get("index")
                name = f"{device.get('type') or 'device'}{'' if index is None else index}"
                scalars += self._fields(device, [(f, f"hardware/{name}/{f}") for f in DEVICE_FIELDS])
        elif kind == records.ANOMALY:
            name = str(record.get("anomaly"))
            self._anomaly_counts[name] += 1
            scalars.append((f"anomalies/{name}", float(self._anomaly_counts[name])))
            anomaly = record
        else:
            return None                    # run, notice, end: nothing to plot
        return Point(step, wall, scalars, anomaly)

    @staticmethod
    def _fields(record: Mapping[str, Any], table) -> List[Tuple[str, float]]:
        out = []
        for field, name in table:
            value = number(record.get(field))
            if value is not None:
                out.append((name, value))
        return out


def anomaly_text(record: Mapping[str, Any]) -> str:
    """One Markdown paragraph (TensorBoard renders text summaries as Markdown)."""
    value, threshold = number(record.get("value")), number(record.get("threshold"))
    parts = [f"**{record.get('anomaly')}** at step {record.get('step')} "
             f"(rank {record.get('rank')}): {record.get('message')}"]
    if value is not None or threshold is not None:
        parts.append(f"value {fmt.number(value)}, threshold {fmt.number(threshold)}")
    parts.append("actions: " + (", ".join(record.get("actions") or []) or "none"))
    if record.get("checkpoint"):
        parts.append(f"checkpoint: `{record['checkpoint']}`")
    if record.get("report"):
        parts.append(f"report: `{record['report']}`")
    return " — ".join(parts)


class TensorBoardSink(Sink):
    """Writes with ``tensorboardX.SummaryWriter``. One subdirectory per rank, so several ranks
    sharing a run directory never write into one event file and TensorBoard lists them as
    runs ``rank_0``, ``rank_1``, ...

    Each record's scalars go out as ONE event (a ``Summary`` with several values, which
    TensorBoard reads like separate ``add_scalar`` calls). ``add_scalar`` per value would cost
    a queue hand-off per value (~0.2 ms per step record, ~1 ms per hardware record of 8
    devices, against ~0.05/0.1 ms this way) and log a warning for every non-finite value,
    which a diverged run would repeat every step (the run log reports those as anomalies).

    Buffering: tensorboardX hands events to a background thread that writes them and flushes
    the file at most ``flush_secs`` seconds (5 by default) after new data, so a live
    TensorBoard lags by at most that; ``flush()`` cannot hurry events still in that thread's
    queue. ``close`` writes and flushes everything. ``write`` may be called from several
    threads (a lock guards the step bookkeeping)."""

    def __init__(self, log_dir: str, rank: int = 0, *, flush_secs: int = 5):
        try:
            from tensorboardX import SummaryWriter
            from tensorboardX.proto.summary_pb2 import Summary
        except ImportError as exc:
            raise ImportError(
                "the TensorBoard sink (tensorboard=True) needs the tensorboardX package: "
                "pip install tensorboardX   (or: pip install 'mindwatch[tensorboard]')") from exc
        self.directory = os.path.join(log_dir, "tensorboard", f"rank_{rank}")
        os.makedirs(self.directory, exist_ok=True)
        # max_queue: events held before add_* blocks on the writer thread (default 10 would
        # make a burst of records wait for disk).
        self._writer = SummaryWriter(logdir=self.directory, flush_secs=flush_secs,
                                     max_queue=1000)
        self._summary = Summary
        self._view = ScalarView()
        self._lock = threading.Lock()

    def write(self, record: Mapping[str, Any]) -> None:
        with self._lock:
            if self._writer is None:
                raise RuntimeError(f"TensorBoard sink for {self.directory} is already closed")
            point = self._view.point(record)
            if point is None:
                return
            if point.scalars:
                values = [self._summary.Value(tag=name, simple_value=value)
                          for name, value in point.scalars]     # simple_value: float32
                self._writer.file_writer.add_summary(self._summary(value=values),
                                                     point.step, point.wall_time)
            if point.anomaly is not None:
                self._writer.add_text("anomalies", anomaly_text(point.anomaly),
                                      global_step=point.step, walltime=point.wall_time)

    def flush(self) -> None:
        with self._lock:
            if self._writer is not None:
                self._writer.flush()

    def close(self) -> None:
        with self._lock:
            if self._writer is not None:
                self._writer.close()       # flushes the queue and closes the event file
                self._writer = None
