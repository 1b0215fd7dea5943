"""Carrying out what the policy decided for each anomaly: checkpoint, report, stop.

The framework-specific parts (saving a checkpoint, how to resume from it, notes on the set-up)
come from the ``FrameworkHooks`` the monitor was built with.
"""
from __future__ import annotations

import math
from collections import deque
from typing import Any, Deque, List, Mapping, Optional, Tuple

from .anomaly import GRAD_SPIKE, GRADIENT_EXPLODE, GRADIENT_NONFINITE, GRADIENT_VANISH, Anomaly
from .anomaly_report import HISTORY_STEPS, write_report
from .framework import FrameworkHooks
from .policy import Policy
from .records import Step

GRADIENT_KINDS = (GRADIENT_NONFINITE, GRADIENT_EXPLODE, GRADIENT_VANISH, GRAD_SPIKE)
TOP_LAYERS = 5


class Responder:
    """Keeps what a report needs (the last steps, the latest hardware sample, the latest
    per-layer norms) and acts on each anomaly's policy."""

    def __init__(self, *, log_dir: str, rank: int, policy: Policy, framework: FrameworkHooks):
        self.log_dir, self.rank, self.policy = log_dir, rank, policy
        self.framework = framework
        self.history: Deque[Mapping[str, Any]] = deque(maxlen=HISTORY_STEPS)
        self.hardware: Optional[Mapping[str, Any]] = None
        self.layer_norms: Optional[Tuple[int, Mapping[str, float]]] = None

    def remember_step(self, record: Mapping[str, Any],
                      layer_norms: Optional[Mapping[str, float]] = None) -> None:
        self.history.append(record)
        if layer_norms is not None:
            self.layer_norms = (record[Step.STEP], layer_norms)

    def remember_hardware(self, record: Mapping[str, Any]) -> None:
        self.hardware = record

    def respond(self, found: List[Anomaly], fallback_step: int) -> None:
        """Fill in each anomaly's actions, checkpoint and report (one checkpoint per call:
        several anomalies of one step share it)."""
        checkpoint = None
        save, resume_hint = self.framework.save_checkpoint, self.framework.resume_hint
        for anomaly in found:
            if not anomaly.actions:      # peer stops come with the originating rank's actions
                anomaly.actions = self.policy.actions_for(anomaly.kind)
            if "checkpoint" in anomaly.actions:
                if checkpoint is None and save is not None:
                    checkpoint = save(anomaly.step or fallback_step)
                anomaly.checkpoint = checkpoint
            if anomaly.actions != ["warn"]:
                anomaly.report = write_report(
                    log_dir=self.log_dir, rank=self.rank, anomaly=anomaly,
                    history=list(self.history), hardware=self.hardware,
                    notes=self._notes(anomaly), top_layers=self._top_layers(anomaly),
                    resume_snippet=resume_hint(checkpoint) if checkpoint and resume_hint
                    else None)

    def _top_layers(self, anomaly: Anomaly) -> Optional[List[list]]:
        """For gradient anomalies: the layers with the largest (or non-finite) gradient norm
        at that step, when per-layer norms are measured."""
        if anomaly.kind not in GRADIENT_KINDS or self.layer_norms is None:
            return None
        step, norms = self.layer_norms
        if step != anomaly.step:
            return None
        # NaN/Inf first, then by size; a vanishing gradient is reported by its largest layers.
        ranked = sorted(norms.items(), key=lambda item: (math.isfinite(item[1]), -abs(item[1])
                                                          if math.isfinite(item[1]) else 0))
        return [[name, value] for name, value in ranked[:TOP_LAYERS]]

    def _notes(self, anomaly: Anomaly) -> List[str]:
        notes = self.framework.report_notes()
        last: Optional[Mapping[str, Any]] = self.history[-1] if self.history else None
        if anomaly.checkpoint and last is not None and last.get(Step.STEP) == anomaly.step:
            if last.get(Step.SKIPPED):
                notes.append(f"the checkpoint holds the last good weights: step {anomaly.step}'s "
                             "update was withheld")
            else:
                notes.append(f"the checkpoint's weights INCLUDE step {anomaly.step}'s update "
                             "(it was not withheld: train with monitor.wrap(..., "
                             "skip_anomalous_updates=True) to keep the last good weights)")
        if "checkpoint" in anomaly.actions and anomaly.checkpoint is None:
            notes.append("no checkpoint was written: no weights are known to this monitor "
                         "(use mindwatch.mindspore.TrainMonitor, or build the Monitor with "
                         "framework=FrameworkHooks(save_checkpoint=...))")
        return notes
