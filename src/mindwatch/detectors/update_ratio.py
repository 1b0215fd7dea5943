"""``update_ratio``: a layer whose update is far too large for its weights.

The update/weight ratio (``update_norm / weight_norm`` of one layer at a state step) is how
far one step moves a layer, relative to where it is: healthy runs keep it within a steady
band per layer (~1e-3 for a Transformer's matrices at peak LR), and a layer whose ratio jumps
is being torn up by its updates (an LR far too high for it, a moment blown up) often
thousands of steps before the loss shows it. Two rules, per layer:

- the ratio is more than ``factor`` times the median of its last ``window`` state records
  (after ``warmup`` of them), the layer's own band;
- or it is above ``ceiling`` whatever its history (an update a third of the weight's size).

Only upward: a ratio that falls (an LR decaying to zero at the end of a schedule) is no
fault. One anomaly per layer and episode; the message names the layer.
"""
from __future__ import annotations

import statistics
from collections import deque
from collections.abc import Mapping
from typing import Any

from ..anomaly import UPDATE_RATIO, Anomaly
from ..basics.checks import check_int, check_number
from ..records import LayerState
from .base import Detector, Episode, is_finite


class UpdateRatioDetector(Detector):
    def __init__(self, *, factor: float, ceiling: float, window: int = 20, warmup: int = 3):
        check_number("update_ratio_factor", factor, low=1.0, low_open=True)
        check_number("update_ratio_ceiling", ceiling, low=0.0, low_open=True)
        check_int("window", window, minimum=1)
        check_int("warmup", warmup, minimum=1)
        self.factor, self.ceiling, self.window, self.warmup = factor, ceiling, window, warmup
        self._history: dict[str, deque[float]] = {}
        self._episodes: dict[str, Episode] = {}

    def update_state(self, step: int, layers: Mapping[str, Mapping[str, Any]],
                     activations: Mapping[str, Mapping[str, Any]] | None = None
                     ) -> list[Anomaly]:
        worst: tuple[float, str, float, float, str] | None = None   # excess, layer, ...
        for layer, fields in layers.items():
            ratio = fields.get(LayerState.UPDATE_RATIO)
            if not is_finite(ratio):
                continue
            history = self._history.setdefault(layer, deque(maxlen=self.window))
            median = statistics.median(history) if len(history) >= self.warmup else None
            threshold, why = self.ceiling, f"above update_ratio_ceiling {self.ceiling:g}"
            # a layer that has not moved (median 0: frozen, or withheld updates) has no band
            if median is not None and 0 < self.factor * median < threshold:
                threshold = self.factor * median
                why = (f"{ratio / median:.3g}x its median {median:.3g} over its last "
                       f"{len(history)} state records (update_ratio_factor {self.factor:g})")
            past = ratio > threshold
            episode = self._episodes.setdefault(layer, Episode())
            if episode.starts(past) and (worst is None or ratio / threshold > worst[0]):
                worst = (ratio / threshold, layer, ratio, threshold, why)
            if not past:            # an anomalous ratio would widen the band it broke
                history.append(ratio)
        if worst is None:
            return []
        _, layer, ratio, threshold, why = worst
        return [Anomaly(UPDATE_RATIO, step, ratio, threshold,
                        f"layer {layer}: update/weight ratio {ratio:.3g} at step {step} is "
                        f"{why}", layer=layer)]

    def state_dict(self) -> dict[str, Any]:
        return {"history": {layer: list(values) for layer, values in self._history.items()},
                "episodes": [layer for layer, e in self._episodes.items() if e.active]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._history = {layer: deque(values, maxlen=self.window)
                         for layer, values in state.get("history", {}).items()}
        self._episodes = {}
        for layer in state.get("episodes", []):
            self._episodes.setdefault(layer, Episode()).active = True
