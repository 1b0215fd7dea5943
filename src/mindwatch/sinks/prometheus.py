"""Prometheus view of the run: the latest values as gauges, anomalies as a counter, served over
HTTP at ``http://<host>:<port>/metrics`` by a daemon thread of this process."""
from __future__ import annotations

import math
import threading
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from .. import records
from ..anomaly import ANOMALY_KINDS
from ..basics.checks import check_token
from ..basics.numbers import to_number
from ..records import Anomaly, Common, Device, Hardware, Step, device_label
from .base import Sink

if TYPE_CHECKING:
    from wsgiref.simple_server import WSGIServer

# (record field, metric name, help); units in the names follow Prometheus' naming practice.
_STEP_GAUGES = (
    (Step.LOSS, "mindwatch_loss", "Loss the train cell returned at the latest step"),
    (Step.LOSS_SMOOTH, "mindwatch_loss_smooth", "Exponential moving average of finite losses"),
    (Step.LR, "mindwatch_lr", "Learning rate applied at the latest step (first group)"),
    (Step.GRAD_NORM, "mindwatch_grad_norm", "Global L2 norm of the gradients before clipping"),
    (Step.STEP, "mindwatch_step", "Latest global step (1-based)"),
    (Step.EPOCH, "mindwatch_epoch", "Current epoch (1-based)"),
    (Step.STEP_TIME_S, "mindwatch_step_time_seconds", "Wall time per training step"),
    (Step.SAMPLES_PER_S, "mindwatch_samples_per_second",
     "Training samples per second on this rank"),
    (Step.TOKENS_PER_S, "mindwatch_tokens_per_second",
     "Training tokens per second on this rank (with tokens_per_sample)"),
    (Step.MFU, "mindwatch_mfu_ratio",
     "Model FLOPs utilisation of this rank's device, 0-1 (with flops_per_token, peak_tflops)"),
)
_HOST_GAUGES = (
    (Hardware.CPU_PERCENT, "mindwatch_cpu_percent", "Host CPU utilisation, percent"),
    (Hardware.MEM_USED_GB, "mindwatch_memory_used_gigabytes", "Host memory in use, GB"),
    (Hardware.RSS_GB, "mindwatch_process_resident_memory_gigabytes",
     "Resident memory of this process, GB"),
)
_DEVICE_GAUGES = (
    (Device.UTIL_PERCENT, "mindwatch_device_util_percent", "Accelerator utilisation, percent"),
    (Device.MEM_USED_MB, "mindwatch_device_mem_used_megabytes", "Accelerator memory in use, MB"),
    (Device.TEMP_C, "mindwatch_device_temperature_celsius",
     "Accelerator temperature, degrees Celsius"),
    (Device.POWER_W, "mindwatch_device_power_watts", "Accelerator power draw, watts"),
)


class PrometheusSink(Sink):
    """Gauges labelled ``rank`` (and ``device``, e.g. "npu0", for accelerator gauges); the
    counter ``mindwatch_anomalies_total{rank,kind}`` starts at 0 for every anomaly kind so
    that ``increase()`` sees the first one.

    Unknown values: a series appears with its first known value; a later null sets it to NaN
    (a stale number would be a lie), non-finite values are exposed as NaN/+Inf/-Inf.

    Each sink has its own ``CollectorRegistry`` (several sinks can live in one process). The
    server binds ``host`` (loopback by default: expose it wider only on purpose) and
    ``port``; port 0 takes a free port, the bound one is ``.port``. One port per process: on
    a multi-rank machine give each rank its own port. Thread-safe (prometheus_client metrics
    are); ``close`` stops the server and frees the port."""

    def __init__(self, port: int, rank: int = 0, host: str = "127.0.0.1"):
        try:
            from prometheus_client import CollectorRegistry, Counter, Gauge, start_http_server
        except ImportError as exc:
            raise ImportError(
                "the Prometheus sink (prometheus_port=...) needs the prometheus-client package: "
                "pip install prometheus-client   (or: pip install 'mindwatch[prometheus]')"
            ) from exc
        check_token("host", host)
        self.rank = str(rank)
        self.host = host
        self.registry = CollectorRegistry(auto_describe=True)
        self._gauges: dict[str, Any] = {}
        for field, name, doc in _STEP_GAUGES + _HOST_GAUGES:
            self._gauges[field] = Gauge(name, doc, ["rank"], registry=self.registry)
        self._device_gauges: dict[str, Any] = {
            field: Gauge(name, doc, ["rank", "device"], registry=self.registry)
            for field, name, doc in _DEVICE_GAUGES}
        self.anomalies = Counter("mindwatch_anomalies", "Anomalies detected, by kind",
                                 ["rank", "kind"], registry=self.registry)
        for kind in ANOMALY_KINDS:
            self.anomalies.labels(rank=self.rank, kind=kind)
        self._known: set = set()               # (field, device) series that exist
        self._lock = threading.Lock()
        try:
            # prometheus_client >= 0.16 returns (server, thread); older ones return None,
            # and then close() could not free the port, so such versions are refused.
            started = start_http_server(port, addr=host, registry=self.registry)
        except OSError as exc:
            raise OSError(f"Prometheus sink cannot listen on {host}:{port}: {exc}") from exc
        if not isinstance(started, tuple):
            raise RuntimeError("the Prometheus sink needs prometheus-client >= 0.17 (its "
                               "start_http_server must return the server): "
                               "pip install -U prometheus-client")
        self._server: WSGIServer | None       # None once closed
        self._server, self._thread = started
        self.port: int = self._server.server_port

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host     # an IPv6 address
        return f"http://{host}:{self.port}/metrics"

    def _set(self, field: str, value: Any, device: str | None = None) -> None:
        key: tuple[str, str | None] = (field, device)
        number_ = to_number(value)
        if number_ is None:
            if key not in self._known:
                return                          # never known: no series at all
            number_ = math.nan
        self._known.add(key)
        if device is None:
            self._gauges[field].labels(rank=self.rank).set(number_)
        else:
            self._device_gauges[field].labels(rank=self.rank, device=device).set(number_)

    def write(self, record: Mapping[str, Any]) -> None:
        kind = record.get(Common.KIND)
        with self._lock:
            if kind == records.STEP:
                for field, _, _ in _STEP_GAUGES:
                    self._set(field, record.get(field))
            elif kind == records.HARDWARE:
                for field, _, _ in _HOST_GAUGES:
                    self._set(field, record.get(field))
                for device in record.get(Hardware.DEVICES) or []:
                    name = device_label(device)
                    for field, _, _ in _DEVICE_GAUGES:
                        self._set(field, device.get(field), name)
            elif kind == records.ANOMALY:
                self.anomalies.labels(rank=self.rank,
                                      kind=str(record.get(Anomaly.ANOMALY))).inc()

    def close(self) -> None:
        with self._lock:
            if self._server is not None:
                self._server.shutdown()         # stops serve_forever
                self._server.server_close()     # closes the listening socket: port free
                self._thread.join(timeout=5)
                self._server = None
