"""Carrying out what the policy decided for each anomaly: checkpoint, report, stop.

The framework-specific parts come in as hooks the adapter sets: ``checkpointer(step)``
saves the weights and returns the path; ``resume_snippet(path)`` says how to load them.
"""
from __future__ import annotations

import math
from collections import deque
from typing import Any, Callable, Deque, Dict, List, Mapping, Optional

from .anomaly import GRAD_SPIKE, GRADIENT_EXPLODE, GRADIENT_NONFINITE, GRADIENT_VANISH, Anomaly
from .anomaly_report import HISTORY_STEPS, write_report
from .policy import Policy

Checkpointer = Callable[[int], Optional[str]]
GRADIENT_KINDS = (GRADIENT_NONFINITE, GRADIENT_EXPLODE, GRADIENT_VANISH, GRAD_SPIKE)
TOP_LAYERS = 5


class Responder:
    def __init__(self, *, log_dir: str, rank: int, policy: Policy):
        self.log_dir, self.rank, self.policy = log_dir, rank, policy
        self.checkpointer: Optional[Checkpointer] = None
        self.resume_snippet: Optional[Callable[[str], str]] = None
        self.notes: List[str] = []            # said in every report (how training was set up)
        self.history: Deque[Dict[str, Any]] = deque(maxlen=HISTORY_STEPS)
        self.hardware: Optional[Dict[str, Any]] = None
        self.layer_norms: Optional[tuple] = None        # (step, {layer: norm})

    def respond(self, found: List[Anomaly], fallback_step: int) -> None:
        """Fill in each anomaly's actions, checkpoint and report (one checkpoint per call:
        several anomalies of one step share it)."""
        checkpoint = None
        for anomaly in found:
            if not anomaly.actions:      # peer stops come with the originating rank's actions
                anomaly.actions = self.policy.actions_for(anomaly.kind)
            if "checkpoint" in anomaly.actions:
                if checkpoint is None and self.checkpointer is not None:
                    checkpoint = self.checkpointer(anomaly.step or fallback_step)
                anomaly.checkpoint = checkpoint
            if anomaly.actions != ["warn"]:
                anomaly.report = write_report(
                    log_dir=self.log_dir, rank=self.rank, anomaly=anomaly,
                    history=list(self.history), hardware=self.hardware,
                    notes=self._notes(anomaly), top_layers=self._top_layers(anomaly),
                    resume_snippet=self.resume_snippet(checkpoint)
                    if checkpoint and self.resume_snippet else None)

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
        notes = list(self.notes)
        last: Optional[Mapping[str, Any]] = self.history[-1] if self.history else None
        if anomaly.checkpoint and last is not None and last.get("step") == anomaly.step:
            if last.get("skipped"):
                notes.append(f"the checkpoint holds the last good weights: step {anomaly.step}'s "
                             "update was withheld")
            else:
                notes.append(f"the checkpoint's weights INCLUDE step {anomaly.step}'s update "
                             "(it was not withheld: train with monitor.wrap(..., "
                             "skip_anomalous_updates=True) to keep the last good weights)")
        if "checkpoint" in anomaly.actions and anomaly.checkpoint is None:
            notes.append("no checkpoint was written: no weights are known to this monitor "
                         "(use mindwatch.mindspore.TrainMonitor, or set "
                         "monitor.responder.checkpointer)")
        return notes
