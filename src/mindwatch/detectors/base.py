"""The detector interface: observations in, anomalies out; no I/O, no clock of its own."""
from __future__ import annotations

import math
from typing import Any, Dict, List, Optional

from ..anomaly import Anomaly
from ..observation import HardwareSample, StepObservation


def is_finite(value: Optional[float]) -> bool:
    return value is not None and math.isfinite(value)


class Detector:
    """One rule family. Subclasses override the hooks they need.

    State that must survive a resumed run (windows, streaks) goes through
    ``state_dict``/``load_state_dict`` as plain JSON-able data.
    """

    def update(self, observation: StepObservation) -> List[Anomaly]:
        return []

    def update_hardware(self, sample: HardwareSample) -> List[Anomaly]:
        return []

    def state_dict(self) -> Dict[str, Any]:
        return {}

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        pass
