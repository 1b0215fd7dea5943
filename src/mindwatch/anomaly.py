"""What a detector reports: one anomaly of a stable kind at one step."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import List, Optional, Tuple

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

# Stable strings (docs/log-format.md), in the order a report lists them.
ANOMALY_KINDS = (
    LOSS_NONFINITE, GRADIENT_NONFINITE, GRADIENT_EXPLODE, GRADIENT_VANISH, LOSS_SPIKE,
    GRAD_SPIKE, LOSS_RISING, LR_ANOMALY, OVERHEAT, MEMORY_PRESSURE, STRAGGLER, PEER_STOP,
)


@dataclass
class Anomaly:
    """One finding. ``actions`` is filled in by the policy, ``checkpoint``/``report`` once written."""

    kind: str
    step: Optional[int]
    value: Optional[float]
    threshold: Optional[float]
    message: str
    actions: List[str] = field(default_factory=list)
    checkpoint: Optional[str] = None
    report: Optional[str] = None
    # For peer_stop: (rank, anomaly kind) of the rank whose anomaly stopped the run.
    origin: Optional[Tuple[int, str]] = None

    @property
    def stops(self) -> bool:
        return "stop" in self.actions
