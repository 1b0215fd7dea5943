"""Absolute bounds on the global gradient norm: explosion at once, vanishing after a streak."""
from __future__ import annotations

from typing import Any

from ..anomaly import GRADIENT_EXPLODE, GRADIENT_VANISH, Anomaly
from ..observation import StepObservation
from .base import Detector, is_finite


class GradBoundsDetector(Detector):
    def __init__(self, *, explode: float = 100.0, vanish: float = 1e-6, vanish_steps: int = 3):
        self.explode = explode
        self.vanish = vanish
        self.vanish_steps = vanish_steps
        self._vanish_streak = 0

    def update(self, obs: StepObservation) -> list[Anomaly]:
        norm = obs.grad_norm
        if not is_finite(norm):     # non-finite norms are NonFiniteDetector's
            return []
        if norm > self.explode:
            self._vanish_streak = 0
            return [Anomaly(GRADIENT_EXPLODE, obs.step, norm, self.explode,
                            f"global gradient norm {norm:.4g} > {self.explode:g} at step "
                            f"{obs.step}")]
        if norm >= self.vanish:
            self._vanish_streak = 0
            return []
        self._vanish_streak += obs.steps
        # Fire once when the streak reaches its length, not on every later step of it.
        if self._vanish_streak - obs.steps < self.vanish_steps <= self._vanish_streak:
            return [Anomaly(GRADIENT_VANISH, obs.step, norm, self.vanish,
                            f"global gradient norm {norm:.3g} < {self.vanish:g} for "
                            f"{self._vanish_streak} consecutive steps (up to step {obs.step})")]
        return []

    def state_dict(self) -> dict[str, Any]:
        return {"vanish_streak": self._vanish_streak}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._vanish_streak = int(state.get("vanish_streak", 0))
