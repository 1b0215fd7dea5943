"""``on_anomaly="skip"``: withhold the anomalous step's update and go on.

The update is withheld in wrap's graph, on the step itself, before the host has seen it; the
host's part is here:

- **Limits**: after each step, the loss and gradient-norm values that would fire the spike
  rules at the next step (``SpikeDetector.limit``; ``inf`` during the warm-up or when the
  kind is not on "skip"), and the LR above which the next step is a blow-up
  (``LrAnomalyDetector.limit``, whenever ``lr_anomaly`` is not on "warn": withholding is
  then what the user asked for, and a "warn" user whose schedule jumps on purpose keeps
  training). The adapter hands them to the graph, which withholds the update of a step
  whose loss, norm or LR is above them (and of any step with a non-finite loss, norm or LR,
  a negative LR, or a norm above grad_explode, whatever the policies).
- **Actions**: an anomaly of a skippable kind on "skip" gets ``["skip"]`` when the step's
  update was withheld (the adapter repeats the graph's float32 decision into
  ``skipped``), else ``["warn"]`` (without wrap nothing can be withheld: said once).
  Other kinds are found from history, after the update: "skip" is "warn" for them.
- **Repeats**: the spike rules fire once per episode, but the graph withholds every step
  above the limit (withheld values stay out of the window, so a lasting shift keeps being
  withheld). Each such step is reported, so that withheld updates never go unexplained and
  the escalation below counts them.
- **Escalation**: after ``max_skips`` withheld updates within the last ``ESCALATION_STEPS``
  steps, the next "skip" anomaly becomes checkpoint_and_stop: skipping cannot fix a fault
  that lasts (a bad LR, a broken data shard), and the message says so.
"""
from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..anomaly import (
    GRAD_SPIKE,
    GRADIENT_EXPLODE,
    GRADIENT_NONFINITE,
    LOSS_NONFINITE,
    LOSS_SPIKE,
    LR_ANOMALY,
    Anomaly,
)
from ..detectors.base import Detector
from ..detectors.lr_anomaly import LrAnomalyDetector
from ..detectors.spike import SpikeDetector
from ..observation import StepObservation
from ..policy import REWINDABLE_KINDS, SKIP, WARN, Policy

# Kinds found on the step itself, before its update could be applied, by values the graph
# can compare: only these can be withheld.
SKIPPABLE_KINDS = (LOSS_NONFINITE, GRADIENT_NONFINITE, GRADIENT_EXPLODE, LOSS_SPIKE, GRAD_SPIKE,
                   LR_ANOMALY)
ESCALATION_STEPS = 100        # steps over which withheld updates count towards max_skips
# Withheld by wrap's graph whatever their policy (lr_anomaly unless on "warn").
ALWAYS_WITHHELD = (LOSS_NONFINITE, GRADIENT_NONFINITE, GRADIENT_EXPLODE, LR_ANOMALY)


def not_withheld_reason(kind: str, policy: str) -> str:
    """Why a train step that withholds anomalous updates still applied this one, and what
    would withhold it: the advice a report gives about its checkpoint."""
    if kind in ALWAYS_WITHHELD:
        return (f"its values were within the graph's limits when the step ran; the {kind} "
                "was found by the host's rule")
    if kind in SKIPPABLE_KINDS:
        return (f"{kind} is withheld on the step only under on_anomaly={{{kind!r}: 'skip'}}"
                f"; its policy is {policy!r}")
    return (f"{kind} is found from the steps before, after the update was applied; "
            f"on_anomaly={{{kind!r}: 'rewind'}} goes back to a snapshot from before its onset"
            if kind in REWINDABLE_KINDS else
            f"{kind} is not a fault of the update, which nothing withholds")


@dataclass(frozen=True)
class SkipLimits:
    """In force for the next step: its update is withheld above these (``inf``: no limit)."""
    loss: float = math.inf
    grad_norm: float = math.inf
    lr: float = math.inf


class SkipGuard:
    @classmethod
    def from_detectors(cls, policy: Policy, *, max_skips: int,
                       detectors: Sequence[Detector]) -> SkipGuard:
        """The guard over the monitor's own spike and LR rules (their limits go to the graph)."""
        spikes = {d.kind: d for d in detectors if isinstance(d, SpikeDetector)}
        return cls(policy, max_skips=max_skips, loss_spike=spikes.get(LOSS_SPIKE),
                   grad_spike=spikes.get(GRAD_SPIKE),
                   lr_rule=next((d for d in detectors if isinstance(d, LrAnomalyDetector)),
                                None))

    def __init__(self, policy: Policy, *, max_skips: int, loss_spike: SpikeDetector | None,
                 grad_spike: SpikeDetector | None, lr_rule: LrAnomalyDetector | None = None):
        self.kinds = frozenset(k for k in SKIPPABLE_KINDS if policy.policy_for(k) == SKIP)
        self.max_skips = max_skips
        self._loss_spike = loss_spike if LOSS_SPIKE in self.kinds else None
        self._grad_spike = grad_spike if GRAD_SPIKE in self.kinds else None
        self._lr_rule = lr_rule if policy.policy_for(LR_ANOMALY) != WARN else None
        self._withheld: deque[int] = deque()        # steps whose update was withheld
        self._said_not_withheld = False
        self.limits = SkipLimits()
        self.refresh()

    def refresh(self) -> None:
        """Recompute the limits from the rules' windows (after a step, a loaded state)."""
        lr_rule = self._lr_rule
        self.limits = SkipLimits(
            loss=self._loss_spike.limit() if self._loss_spike is not None else math.inf,
            grad_norm=min(self._grad_spike.limit() if self._grad_spike is not None
                          else math.inf, lr_rule.norm_limit() if lr_rule is not None
                          else math.inf),
            lr=lr_rule.limit() if lr_rule is not None else math.inf)

    def review(self, obs: StepObservation, found: list[Anomaly],
               unprotected: Callable[[], str | None] | None = None,
               ) -> tuple[list[Anomaly], str | None]:
        """Set the actions of this step's "skip" anomalies, add the repeats; returns them and
        a notice to say (once: "skip" could not withhold anything), or None. ``unprotected``:
        the framework's reason the train cell withholds nothing, with what to change."""
        if not obs.skipped:            # a withheld value stays out of the windows
            self.refresh()
        if not self.kinds:
            return found, None
        prior = self._count_withheld(obs)
        found = found + self._repeats(obs, found)
        notice = None
        for anomaly in found:
            if anomaly.kind not in self.kinds or anomaly.actions:
                continue
            if not obs.skipped:
                anomaly.actions = ["warn"]
                if not self._said_not_withheld:
                    self._said_not_withheld = True
                    why = (unprotected() if unprotected is not None else None) or (
                        "that needs monitor.wrap(..., skip_anomalous_updates=True)")
                    notice = (f"on_anomaly 'skip' ({anomaly.kind} at step {obs.step}): the "
                              f"update was not withheld, so 'skip' acts as 'warn' ({why})")
            elif prior >= self.max_skips:
                anomaly.actions = ["skip", "checkpoint", "stop"]
                anomaly.message += (
                    f"; escalated to checkpoint_and_stop: {prior} updates were already "
                    f"withheld in the last {ESCALATION_STEPS} steps (max_skips="
                    f"{self.max_skips}), so skipping does not cure this fault")
            else:
                anomaly.actions = ["skip"]
        return found, notice

    def state_dict(self) -> dict[str, Any]:
        """The steps whose update was withheld within the escalation window, so a resumed
        run escalates after ``max_skips`` in all, not ``max_skips`` more."""
        return {"withheld_steps": list(self._withheld)}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self._withheld = deque(int(step) for step in state.get("withheld_steps", []))
        self.refresh()

    def _count_withheld(self, obs: StepObservation) -> int:
        """Withheld updates in the ESCALATION_STEPS steps before this one; records this one."""
        withheld = self._withheld
        if withheld and withheld[-1] >= obs.step:      # a new run segment counts from 1
            withheld.clear()
        while withheld and withheld[0] <= obs.step - ESCALATION_STEPS:
            withheld.popleft()
        prior = len(withheld)
        if obs.skipped:
            withheld.append(obs.step)
        return prior

    def _repeats(self, obs: StepObservation, found: list[Anomaly]) -> list[Anomaly]:
        """A withheld step above a spike limit whose rule stayed quiet (same episode)."""
        if not obs.skipped:
            return []
        reported = {anomaly.kind for anomaly in found}
        repeats = []
        for kind, value, limit, label in (
                (LOSS_SPIKE, obs.loss, self.limits.loss, "loss"),
                (GRAD_SPIKE, obs.grad_norm, self.limits.grad_norm, "gradient norm")):
            if kind in self.kinds and kind not in reported and value is not None \
                    and math.isfinite(value) and value > limit:
                repeats.append(Anomaly(
                    kind, obs.step, value, limit,
                    f"{label} {value:.4g} at step {obs.step} is still above the spike limit "
                    f"{limit:.4g}: its update was withheld again"))
        return repeats
