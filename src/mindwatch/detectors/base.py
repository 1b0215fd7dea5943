"""The detector interface: observations in, anomalies out; no I/O, no clock of its own."""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any, TypeGuard

from ..anomaly import Anomaly
from ..observation import HardwareSample, StepObservation


def is_finite(value: float | None) -> TypeGuard[float]:
    """True for a finite number; also tells the type checker that ``value`` is not None."""
    return value is not None and math.isfinite(value)


class Episode:
    """One alarm per episode: ``starts(condition)`` is True when the condition begins to hold;
    the rule re-arms once it has cleared. Part of a resumed detector's state."""

    def __init__(self) -> None:
        self.active = False

    def starts(self, condition: bool) -> bool:
        begins = condition and not self.active
        self.active = condition
        return begins

    def state_dict(self) -> dict[str, Any]:
        return {"in_episode": self.active}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.active = bool(state.get("in_episode", False))


class Detector:
    """One rule family. Subclasses override the hooks they need.

    State that must survive a resumed run (windows, streaks) goes through
    ``state_dict``/``load_state_dict`` as plain JSON-able data.
    """

    # Rules of the training state go back with it when on_anomaly "rewind" restores a
    # snapshot; rules of the hardware keep their state (the device did not go back).
    watches_hardware = False

    def update(self, observation: StepObservation) -> list[Anomaly]:
        return []

    def update_hardware(self, sample: HardwareSample) -> list[Anomaly]:
        return []

    def update_peers(self, step: int, data_times: Sequence[float],
                     step_time_s: float | None) -> list[Anomaly]:
        """Under data parallelism, after each step: every rank's data time, in rank order."""
        return []

    def update_state(self, step: int, layers: Mapping[str, Mapping[str, Any]],
                     activations: Mapping[str, Mapping[str, Any]] | None = None
                     ) -> list[Anomaly]:
        """A state record's per-layer fields (``records.LayerState``) and watched sub-Cells
        (``records.Activation``), every ``state_interval`` steps."""
        return []

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        pass
