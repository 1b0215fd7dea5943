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

Two more rules need no history, so they hold from the first step on: an LR above ``max_lr``,
and an update whose estimated size is more than ``max_update_ratio`` times the weights' RMS
(``detectors/update_size.py``; the adapter hands in the weights' scale). Their ceilings go to
the protected step with the jump's (``limits``), so the step that would wreck the weights is
withheld on the step.
"""
from __future__ import annotations

import math
from typing import Any

from ..anomaly import LR_ANOMALY, Anomaly
from ..observation import StepObservation
from .base import Detector
from .update_size import WeightScale

PEAK_GRID = 1.05


class LrAnomalyDetector(Detector):
    def __init__(self, *, jump_factor: float = 10.0, max_lr: float | None = None,
                 max_update_ratio: float | None = None):
        self.jump_factor = jump_factor
        self.max_lr, self.max_update_ratio = max_lr, max_update_ratio
        self._peak: float | None = None      # the highest LR of an applied update so far
        self.scale: WeightScale | None = None    # the weights the next update changes
        self._lr: float | None = None        # the LR of the next step, as last known
        self._norm: float | None = None      # the gradient norm of the last applied update

    def weights(self, scale: WeightScale | None, lr: float | None = None) -> None:
        """The weights' scale the next updates are judged against (``None``: none known);
        ``lr``: the LR the next step applies, when the adapter knows it (before the first
        step, the gradient rule's ceiling needs it)."""
        self.scale = scale
        if lr is not None:
            self._lr = lr

    def limit(self) -> float:
        """The LR above which the next step is withheld: a blow-up against the run's peak
        (``inf`` before any positive LR), ``max_lr``, an update too large for the weights."""
        limit = min(self._jump_limit(), self.max_lr if self.max_lr is not None else math.inf)
        if self.scale is not None and self.max_update_ratio is not None:
            limit = min(limit, self.scale.lr_ceiling(self.max_update_ratio, self._norm))
        return limit

    def _jump_limit(self) -> float:
        if not self._peak:
            return math.inf
        return self.jump_factor * PEAK_GRID ** math.ceil(math.log(self._peak, PEAK_GRID))

    def norm_limit(self) -> float:
        """Before any applied update: the gradient norm above which the first update, at
        the LR it will apply, is too large for the weights (optimizers whose update is the LR
        times the gradient; afterwards their ceiling is on the LR)."""
        if self.scale is None or self.max_update_ratio is None or self._norm is not None:
            return math.inf
        return self.scale.norm_ceiling(self.max_update_ratio, self._lr)

    def update(self, obs: StepObservation) -> list[Anomaly]:
        lrs = [lr for lr in (obs.lr_groups or [obs.lr]) if lr is not None]
        if not lrs:
            return []
        found = self._judge(obs.step, lrs) or self._too_large(
            obs.step, lrs, obs.grad_norm if self._norm is None else self._norm)
        if all(math.isfinite(lr) for lr in lrs):
            self._lr = max(lrs)
            if not obs.skipped:
                self._peak = max(self._peak or 0.0, *lrs)
        if not obs.skipped and obs.grad_norm is not None and math.isfinite(obs.grad_norm):
            self._norm = obs.grad_norm
        return found

    def _too_large(self, step: int, lrs: list[float],
                   grad_norm: float | None) -> list[Anomaly]:
        """``max_lr``, then the update's size against the weights (no history needed)."""
        highest = max(lrs)
        if self.max_lr is not None and highest > self.max_lr:
            return [Anomaly(LR_ANOMALY, step, highest, self.max_lr,
                            f"learning rate {highest:.3g} at step {step} is above max_lr "
                            f"{self.max_lr:.3g}")]
        scale, bound = self.scale, self.max_update_ratio
        ratio = scale.ratio(highest, grad_norm) if scale is not None else None
        if scale is None or bound is None or ratio is None or ratio <= bound:
            return []
        return [Anomaly(
            LR_ANOMALY, step, highest, highest * bound / ratio,
            f"learning rate {highest:.3g} at step {step} would move the weights by "
            f"~{ratio:.3g}x their RMS ({scale.rms:.3g}) in one update ({scale.describe()}; "
            f"max_update_ratio={bound:g}): an update that size wrecks them, so this is a "
            "wrong LR")]

    def _judge(self, step: int, lrs: list[float]) -> list[Anomaly]:
        bad = [lr for lr in lrs if not math.isfinite(lr)]
        if bad:
            return [Anomaly(LR_ANOMALY, step, bad[0], None,
                            f"learning rate is {bad[0]} at step {step}")]
        negative = min(lrs)
        if negative < 0:
            return [Anomaly(LR_ANOMALY, step, negative, 0.0,
                            f"learning rate is negative ({negative:.3g}) at step {step}")]
        highest, peak, limit = max(lrs), self._peak, self._jump_limit()
        if peak and highest > limit:
            return [Anomaly(
                LR_ANOMALY, step, highest, limit,
                f"learning rate {highest:.3g} at step {step} is {highest / peak:.3g}x "
                f"the highest this run has trained at ({peak:.3g}; lr_jump_factor="
                f"{self.jump_factor:g}): a schedule's warm-up or restart never goes above "
                "its peak, so this is a wrong LR")]
        return []

    def state_dict(self) -> dict[str, Any]:
        return {"peak": self._peak, "lr": self._lr, "grad_norm": self._norm}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        # "previous": what versions before the peak rule saved; the best estimate of a peak
        self._peak = state.get("peak", state.get("previous"))
        self._lr, self._norm = state.get("lr"), state.get("grad_norm")
