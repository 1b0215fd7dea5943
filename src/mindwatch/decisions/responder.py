"""Carrying out what the policy decided for each anomaly: checkpoint, report, stop.

The framework-specific parts (saving a checkpoint, how to resume from it, notes on the set-up)
come from the ``FrameworkHooks`` the monitor was built with. A checkpoint or report that
cannot be written (a full disk) is said once (``pop_problems``) and changes nothing else: the
policy decides whether training stops, never an accident of the disk.
"""
from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ..anomaly import GRAD_SPIKE, GRADIENT_EXPLODE, GRADIENT_NONFINITE, GRADIENT_VANISH, Anomaly
from ..basics.once import OnceMessages
from ..framework import FrameworkHooks, SavedStates
from ..policy import Policy
from ..records import Step
from ..recovery.skipping import not_withheld_reason
from .anomaly_report import HISTORY_STEPS, write_report
from .hang_report import write_hang_report

GRADIENT_KINDS = (GRADIENT_NONFINITE, GRADIENT_EXPLODE, GRADIENT_VANISH, GRAD_SPIKE)
TOP_LAYERS = 5


class Responder:
    """Keeps what a report needs (the last steps, the latest hardware sample, the latest
    per-layer norms) and acts on each anomaly's policy."""

    def __init__(self, *, log_dir: str, rank: int, policy: Policy, framework: FrameworkHooks):
        self.log_dir, self.rank, self.policy = log_dir, rank, policy
        self.framework = framework
        self.history: deque[Mapping[str, Any]] = deque(maxlen=HISTORY_STEPS)
        self.hardware: Mapping[str, Any] | None = None
        self.layer_norms: tuple[int, Mapping[str, float]] | None = None
        self._problems = OnceMessages()
        self._failed_checkpoint: str | None = None    # why the latest checkpoint is missing

    def pop_problems(self) -> list[str]:
        """Failed checkpoint and report writes not said before, each once per kind."""
        return self._problems.pop()

    def checkpoint(self, step: int, reason: str) -> str | None:
        """Save a checkpoint through the framework's hook; None when there is no hook or
        the save failed (said once)."""
        save = self.framework.save_checkpoint
        self._failed_checkpoint = None
        if save is None:
            return None
        try:
            return save(step, reason)
        except Exception as exc:
            self._failed_checkpoint = f"{type(exc).__name__}: {exc}"
            self._problems.report(("checkpoint", type(exc).__name__),
                                  f"the {reason} checkpoint at step {step} could not be "
                                  f"written ({self._failed_checkpoint}); training goes on as "
                                  "the policy says")
            return None

    def remember_step(self, record: Mapping[str, Any],
                      layer_norms: Mapping[str, float] | None = None) -> None:
        self.history.append(record)
        if layer_norms is not None:
            self.layer_norms = (record[Step.STEP], layer_norms)

    def remember_hardware(self, record: Mapping[str, Any]) -> None:
        self.hardware = record

    def respond(self, found: list[Anomaly], fallback_step: int) -> None:
        """Fill in each anomaly's actions, checkpoint and report (one checkpoint per call:
        several anomalies of one step share it)."""
        checkpoint = None
        tried = False
        resume_hint = self.framework.resume_hint
        for anomaly in found:
            if not anomaly.actions:      # peer stops come with the originating rank's actions
                anomaly.actions = self.policy.actions_for(anomaly.kind)
            if "checkpoint" in anomaly.actions:
                if not tried:
                    checkpoint, tried = self.checkpoint(anomaly.step or fallback_step,
                                                        "anomaly"), True
                anomaly.checkpoint = checkpoint
            if anomaly.actions != ["warn"]:
                target = self.resume_target(anomaly)
                anomaly.report = self._write_report(
                    anomaly, resume_hint(target) if target and resume_hint else None)

    def _write_report(self, anomaly: Anomaly, resume: str | None) -> str | None:
        return self._guarded(f"the anomaly report for step {anomaly.step}", lambda: write_report(
            log_dir=self.log_dir, rank=self.rank, anomaly=anomaly,
            history=list(self.history), hardware=self.hardware,
            notes=self._notes(anomaly), top_layers=self._top_layers(anomaly),
            resume_snippet=resume))

    def hang_report(self, anomaly: Anomaly, threads: Sequence[Mapping[str, Any]],
                    where: str | None) -> str | None:
        """Write the hang report (every thread's stack, the latest hardware sample); None
        when it cannot be written (said once)."""
        return self._guarded(f"the hang report after step {anomaly.step}",
                             lambda: write_hang_report(
                                 log_dir=self.log_dir, rank=self.rank, anomaly=anomaly,
                                 where_=where, threads=threads, hardware=self.hardware,
                                 history=list(self.history)))

    def _guarded(self, what: str, write: Callable[[], str]) -> str | None:
        """``write()``'s path, or None when the disk refused it: said once per errno, and
        training goes on (the record is in the run log anyway)."""
        try:
            return write()
        except OSError as exc:
            self._problems.report(("report", exc.errno),
                                  f"{what} could not be written ({type(exc).__name__}: "
                                  f"{exc}); its record is in the run log")
            return None

    def _top_layers(self, anomaly: Anomaly) -> list[list] | None:
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

    def _bad_update_notes(self, anomaly: Anomaly) -> list[str]:
        """The checkpoint holds the anomalous step's update: why, what the user can change,
        and the last good state that exists (said once: who saves the bad weights again)."""
        step = anomaly.step
        unprotected = self.framework.unprotected
        if unprotected is None:         # a framework that says nothing of withholding
            why = ("nothing withheld it: the step was observed with skipped=False after its "
                   "update")
        else:
            why = unprotected() or not_withheld_reason(anomaly.kind,
                                                       self.policy.policy_for(anomaly.kind))
        notes = [f"the checkpoint's weights INCLUDE step {step}'s update ({why})"]
        saved = self.saved_states()
        last_good = saved.last_before(step) if step is not None else None
        if last_good is not None:
            notes.append(f"the last good state on disk is {last_good[1]} (saved after step "
                         f"{last_good[0]}); resume from it, not from this checkpoint")
        else:
            notes.append(f"no training state saved before step {step} exists")
        if saved.saves_at_end:
            later = (f"{saved.saves_at_end} saves the weights again when training ends: that "
                     f"newest file INCLUDES step {step}'s update too")
            notes.append(later)
            self._problems.report(("saves_at_end",), later)     # said once on the console
        return notes

    def saved_states(self) -> SavedStates:
        hook = self.framework.saved_states
        return hook() if hook is not None else SavedStates()

    def _update_withheld(self, anomaly: Anomaly) -> bool | None:
        """Whether the anomaly's checkpoint left its step's update out: True (the last good
        weights), False (it holds that update), None (no checkpoint, or not of that step)."""
        last: Mapping[str, Any] | None = self.history[-1] if self.history else None
        if not anomaly.checkpoint or last is None or last.get(Step.STEP) != anomaly.step:
            return None
        return bool(last.get(Step.SKIPPED))

    def resume_target(self, anomaly: Anomaly) -> str | None:
        """Where to resume from: the anomaly's checkpoint when it holds good weights, else
        the last good state saved before the anomaly's step (None when there is none)."""
        if self._update_withheld(anomaly) is not False:
            return anomaly.checkpoint
        found = self.saved_states().last_before(anomaly.step) if anomaly.step else None
        return found[1] if found is not None else None

    def _notes(self, anomaly: Anomaly) -> list[str]:
        notes = self.framework.report_notes()
        withheld = self._update_withheld(anomaly)
        if withheld:
            notes.append(f"the checkpoint holds the last good weights: step {anomaly.step}'s "
                         "update was withheld")
        elif withheld is False:
            notes += self._bad_update_notes(anomaly)
        if "checkpoint" in anomaly.actions and self._failed_checkpoint is not None:
            notes.append(f"the checkpoint could not be written: {self._failed_checkpoint}")
        elif "checkpoint" in anomaly.actions and anomaly.checkpoint is None:
            notes.append("no checkpoint was written: no weights are known to this monitor "
                         "(use mindwatch.mindspore.TrainMonitor, or build the Monitor with "
                         "framework=FrameworkHooks(save_checkpoint=...))")
        return notes
