"""Adaptive spike rules: a value far above the run's own recent history.

The statistic is a robust z-score of the log value against a rolling window (``robust.py``):
``z = (log x - median) / (MAD_TO_SIGMA * MAD)``. Logs, because losses and gradient norms are
positive and vary multiplicatively (a norm going 1 -> 10 is the same event as 10 -> 100);
median and MAD, because a mean and standard deviation are dragged by the very spikes they
should reveal. Two guards keep healthy noisy runs quiet: a warm-up before the rule may fire,
and a minimum ratio over the median (a z-score over a nearly constant window would flag tiny
wiggles). One alarm per episode: after firing, the rule re-arms once a value is back below
the bound. Values of withheld (skipped) steps stay out of the window.
"""
from __future__ import annotations

import math
from collections import deque
from statistics import median
from typing import Any

from ..anomaly import GRAD_SPIKE, LOSS_SPIKE, Anomaly
from ..observation import StepObservation
from ..records import Step
from .base import Detector, Episode, is_finite
from .robust import robust_sigma, robust_z


class SpikeDetector(Detector):
    def __init__(self, *, field: str, kind: str, window: int = 64, warmup: int = 32,
                 z_threshold: float = 6.0, min_ratio: float = 1.5):
        self.field, self.kind = field, kind
        self.window, self.warmup = window, warmup
        self.z_threshold, self.min_ratio = z_threshold, min_ratio
        self._logs: deque[float] = deque(maxlen=window)
        self._episode = Episode()

    def update(self, obs: StepObservation) -> list[Anomaly]:
        value = getattr(obs, self.field)
        if not is_finite(value) or value <= 0:
            return []
        log_value = math.log(value)
        found: list[Anomaly] = []
        spiking = False
        if len(self._logs) >= self.warmup:
            center = median(self._logs)
            ratio = math.exp(log_value - center)
            # The z-score (a second pass over the window) only where the ratio allows an
            # alarm: that keeps this rule at a few microseconds on the training thread.
            # A flat window (MAD 0) cannot give a z-score; then the ratio alone decides.
            z = robust_z(log_value, self._logs, center) if ratio >= self.min_ratio else None
            spiking = ratio >= self.min_ratio and (z is None or z >= self.z_threshold)
        if self._episode.starts(spiking):      # only ever after the warm-up branch above
            label = "loss" if self.field == Step.LOSS else "gradient norm"
            found.append(Anomaly(
                self.kind, obs.step, value, math.exp(center) * self.min_ratio,
                f"{label} {value:.4g} at step {obs.step} is {ratio:.3g}x the median of the "
                f"last {len(self._logs)} steps ({math.exp(center):.4g}; robust z "
                f"{'inf' if z is None else f'{z:.1f}'} >= {self.z_threshold:g})"))
        if not obs.skipped:
            self._logs.append(log_value)
        return found

    def limit(self) -> float:
        """The smallest value that would fire this rule at the next step (``inf`` during the
        warm-up): ``ratio >= min_ratio`` and ``z >= z_threshold`` solved for the value.
        on_anomaly "skip" hands it to wrap's graph, which withholds an update above it."""
        if len(self._logs) < self.warmup:
            return math.inf
        center = median(self._logs)
        log_bound = math.log(self.min_ratio)
        sigma = robust_sigma(self._logs, center)
        if sigma > 0:                  # a flat window: the ratio alone decides, as in update
            log_bound = max(log_bound, self.z_threshold * sigma)
        try:
            return math.exp(center + log_bound)
        except OverflowError:
            return math.inf

    def state_dict(self) -> dict[str, Any]:
        return {"logs": list(self._logs), **self._episode.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._logs = deque(state.get("logs", []), maxlen=self.window)
        self._episode.load_state_dict(state)


def loss_spike(**options) -> SpikeDetector:
    return SpikeDetector(field=Step.LOSS, kind=LOSS_SPIKE, **options)


def grad_spike(**options) -> SpikeDetector:
    return SpikeDetector(field=Step.GRAD_NORM, kind=GRAD_SPIKE, **options)
