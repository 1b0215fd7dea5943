"""Divergence that no single step reveals: the loss level keeps climbing.

Compares the median loss over the recent half of a window with the median over the older
half. Medians of half-windows smooth the small-batch noise away and ignore a single spike
(that is the spike rule's job), so a healthy run hovering on a plateau stays below the bound,
while a run whose loss level climbs by ``min_rise`` (default 10%) within the window is
flagged, provided the rise also stands out of the run's own noise (see ``significance``).
Losses of withheld (skipped) steps stay out. One alarm per episode, re-armed once
the rise falls back below the bound.
"""
from __future__ import annotations

import math
from collections import deque
from statistics import median
from typing import Any

from ..anomaly import LOSS_RISING, Anomaly
from ..observation import StepObservation
from .base import Detector, Episode, is_finite
from .robust import robust_sigma

_MEDIAN_EFFICIENCY = 1.2533     # standard error of a median = 1.2533 * sigma / sqrt(n)
NOISE_HISTORY = 5               # windows of step-to-step differences kept to measure noise


class LossRisingDetector(Detector):
    def __init__(self, *, window: int = 40, min_rise: float = 0.1, significance: float = 4.0):
        self.window, self.min_rise, self.significance = window, min_rise, significance
        self._losses: deque[float] = deque(maxlen=window)
        self._steps: deque[int] = deque(maxlen=window)      # the step of each loss
        # Step-to-step changes of log(loss) over a longer stretch measure the noise: a
        # difference ignores trends and level shifts, and a long sample keeps the estimate
        # from dipping by chance (a dip would make the rule trigger-happy).
        self._diffs: deque[float] = deque(maxlen=NOISE_HISTORY * window)
        self._episode = Episode()

    def update(self, obs: StepObservation) -> list[Anomaly]:
        if not is_finite(obs.loss) or obs.loss <= 0 or obs.skipped:
            return []
        log_loss = math.log(obs.loss)
        if self._losses:
            self._diffs.append(log_loss - self._losses[-1])
        self._losses.append(log_loss)
        self._steps.append(obs.step)
        if len(self._losses) < self.window:
            return []
        half = self.window // 2
        logs = list(self._losses)
        older, recent = median(logs[:half]), median(logs[half:])
        bound = math.log1p(self.min_rise)
        rising = recent - older >= bound
        if rising:
            # The rise must also stand out of the run's own noise: ``significance`` standard
            # errors of the difference of two half-window medians. Measured only when the
            # rise already passes ``min_rise``: two passes over 200 differences are most of
            # this rule's cost, and most steps cannot fire anyway.
            center = median(self._diffs)
            sigma = robust_sigma(self._diffs, center) / math.sqrt(2)
            standard_error = (_MEDIAN_EFFICIENCY * sigma *
                              math.sqrt(1 / half + 1 / (self.window - half)))
            bound = max(bound, self.significance * standard_error)
            rising = recent - older >= bound
        rise = math.exp(recent - older) - 1.0
        found = []
        if self._episode.starts(rising):
            found.append(Anomaly(
                LOSS_RISING, obs.step, rise, math.expm1(bound),
                f"loss keeps rising: the median of the last {self.window - half} steps is "
                f"{rise:.1%} above the {half} before (bound {math.expm1(bound):.1%}), "
                f"up to step {obs.step}",
                # The rise is measured from the recent half's first step: a rewind must
                # go back to before it (a state from before the divergence set in).
                onset=self._onset(half)))
        return found

    def _onset(self, half: int) -> int | None:
        # A state saved before mindwatch kept steps has none: the anomaly's step stands in.
        return self._steps[half] if len(self._steps) == len(self._losses) else None

    def state_dict(self) -> dict[str, Any]:
        return {"log_losses": list(self._losses), "steps": list(self._steps),
                "diffs": list(self._diffs), **self._episode.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._losses = deque(state.get("log_losses", []), maxlen=self.window)
        self._steps = deque(state.get("steps", []), maxlen=self.window)
        self._diffs = deque(state.get("diffs", []), maxlen=self._diffs.maxlen)
        self._episode.load_state_dict(state)
