"""What a detector reports: one anomaly of a stable kind at one step."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

LOSS_NONFINITE = "loss_nonfinite"
GRADIENT_NONFINITE = "gradient_nonfinite"
GRADIENT_EXPLODE = "gradient_explode"
GRADIENT_VANISH = "gradient_vanish"
LOSS_SPIKE = "loss_spike"
GRAD_SPIKE = "grad_spike"
LOSS_RISING = "loss_rising"
LR_ANOMALY = "lr_anomaly"
OVERHEAT = "overheat"
MEMORY_PRESSURE = "memory_pressure"
STRAGGLER = "straggler"
PEER_STOP = "peer_stop"
# No step ended for hang_timeout_s: found by the watchdog thread (watchdog.py), not a detector.
HANG = "hang"
# Inside the model, at state steps (state_interval): a layer's update/weight ratio.
UPDATE_RATIO = "update_ratio"
# ... and an attention cell's largest logit (wrap's attention_logits).
ATTENTION_LOGIT = "attention_logit"
# A withheld step computed again came out healthy (decisions/replays.py).
TRANSIENT_FAULT = "transient_fault"
# Data-parallel replicas whose weights or optimizer state differ (ranks/replicas.py).
REPLICA_MISMATCH = "replica_mismatch"
# A run that slowly gets worse (detectors/throughput_drop.py, data_bound.py, memory_growth.py).
THROUGHPUT_DROP = "throughput_drop"
MEMORY_GROWTH = "memory_growth"
DATA_BOUND = "data_bound"

# Stable strings (docs/log-format.md), in the order a report lists them.
ANOMALY_KINDS = (
    LOSS_NONFINITE, GRADIENT_NONFINITE, GRADIENT_EXPLODE, GRADIENT_VANISH, LOSS_SPIKE,
    GRAD_SPIKE, LOSS_RISING, LR_ANOMALY, OVERHEAT, MEMORY_PRESSURE, STRAGGLER, PEER_STOP, HANG,
    UPDATE_RATIO, ATTENTION_LOGIT, TRANSIENT_FAULT, REPLICA_MISMATCH, THROUGHPUT_DROP,
    MEMORY_GROWTH, DATA_BOUND,
)

# Reasons to stop that are not anomalies: no anomaly record, the end record says why.
USER_STOP = "user_request"      # a callback or the user called request_stop()
SIGNAL_STOP = "signal"          # SIGTERM or SIGINT during training (on_signal)
SINK_ERROR = "sink_error"       # a sink failed under on_sink_error="raise"
STOP_REQUESTS = (USER_STOP, SIGNAL_STOP, SINK_ERROR)


@dataclass
class Anomaly:
    """One finding. ``actions`` is filled in by the policy, ``checkpoint``/``report`` once
    written."""

    kind: str
    step: int | None
    value: float | None
    threshold: float | None
    message: str
    actions: list[str] = field(default_factory=list)
    checkpoint: str | None = None
    report: str | None = None
    # For peer_stop: (rank, anomaly kind) of the rank whose anomaly stopped the run.
    origin: tuple[int, str] | None = None
    # The first step the fault touched, when it began before ``step`` (loss_rising: where
    # the rise began); on_anomaly "rewind" goes back to a snapshot taken before it.
    onset: int | None = None
    # The layer (update_ratio) or sub-Cell (attention_logit) the anomaly is about.
    layer: str | None = None
    # The rank whose own gradients caused a gradient anomaly, and where it runs.
    origin_rank: int | None = None
    origin_place: tuple[str | None, int | None] | None = None     # (host, device)
    # More fields of the anomaly record, plain JSON (records.Anomaly names them): where the
    # time went (throughput_drop), which memory and when it runs out (memory_growth).
    fields: dict[str, Any] = field(default_factory=dict)

    @property
    def first_step(self) -> int | None:
        return self.onset if self.onset is not None else self.step

    @property
    def stops(self) -> bool:
        return "stop" in self.actions
