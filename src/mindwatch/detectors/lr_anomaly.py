"""A learning rate that is not a number, negative, or far above anything the run trained at.

Schedules move the LR smoothly (warm-up, decay), step it down, or restart it (SGDR's warm
restarts go from near zero back to the peak in one step). None of those rises above the
highest LR the run has already applied. An LR more than ``jump_factor`` times that peak is a
bug or a bad resume (a schedule scaled twice, a per-step list with a typo, a restored LR in
the wrong unit): one such update can wreck the weights, so with ``wrap`` the graph withholds
it (``limit``). A warm-up from exactly zero has no peak yet and is never a jump.

Only applied updates raise the peak: a withheld blow-up must not become the level the next
step is judged against. The limit is ``jump_factor`` x the peak rounded up to the next power
of ``PEAK_GRID``: during a warm-up the peak rises at every step, and each new limit costs the
graph a host-to-device copy (~1.8 ms on the CPU), so the limit moves in steps of 5% instead,
and the graph holds exactly the limit this rule judges by.
"""
from __future__ import annotations

import math
from typing import Any

from ..anomaly import LR_ANOMALY, Anomaly
from ..observation import StepObservation
from .base import Detector

PEAK_GRID = 1.05


class LrAnomalyDetector(Detector):
    def __init__(self, *, jump_factor: float = 10.0):
        self.jump_factor = jump_factor
        self._peak: float | None = None      # the highest LR of an applied update so far

    def limit(self) -> float:
        """The LR above which the next step is a blow-up (``inf`` before any positive LR)."""
        if not self._peak:
            return math.inf
        return self.jump_factor * PEAK_GRID ** math.ceil(math.log(self._peak, PEAK_GRID))

    def update(self, obs: StepObservation) -> list[Anomaly]:
        lrs = [lr for lr in (obs.lr_groups or [obs.lr]) if lr is not None]
        if not lrs:
            return []
        found = self._judge(obs.step, lrs)
        if not obs.skipped and all(math.isfinite(lr) for lr in lrs):
            self._peak = max(self._peak or 0.0, *lrs)
        return found

    def _judge(self, step: int, lrs: list[float]) -> list[Anomaly]:
        bad = [lr for lr in lrs if not math.isfinite(lr)]
        if bad:
            return [Anomaly(LR_ANOMALY, step, bad[0], None,
                            f"learning rate is {bad[0]} at step {step}")]
        negative = min(lrs)
        if negative < 0:
            return [Anomaly(LR_ANOMALY, step, negative, 0.0,
                            f"learning rate is negative ({negative:.3g}) at step {step}")]
        highest, peak, limit = max(lrs), self._peak, self.limit()
        if peak and highest > limit:
            return [Anomaly(
                LR_ANOMALY, step, highest, limit,
                f"learning rate {highest:.3g} at step {step} is {highest / peak:.3g}x "
                f"the highest this run has trained at ({peak:.3g}; lr_jump_factor="
                f"{self.jump_factor:g}): a schedule's warm-up or restart never goes above "
                "its peak, so this is a wrong LR")]
        return []

    def state_dict(self) -> dict[str, Any]:
        return {"peak": self._peak}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        # "previous": what versions before the peak rule saved; the best estimate of a peak
        self._peak = state.get("peak", state.get("previous"))
