"""Carrying out what the policy decided for each anomaly: checkpoint, report, stop.

The framework-specific parts (saving a checkpoint, how to resume from it, notes on the set-up,
what else saved the training state) come from the ``FrameworkHooks`` the monitor was built
with. Where to resume from is last_good.py's rule, over the run log's segments
(run_history.py): the newest saved state from before the damage in the weights began. A
checkpoint or report that cannot be written (a full disk) is said once (``pop_problems``) and
changes nothing else: the policy decides whether training stops, never an accident of the
disk.

Under a replicated training state a job-level event gets one report and one checkpoint, rank
0's (job_share.py): the other ranks log the anomaly and its actions and write neither.
"""
from __future__ import annotations

import os
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ..anomaly import PEER_STOP, Anomaly
from ..basics.once import OnceMessages
from ..basics.run_dir import rank_log_path
from ..framework import FrameworkHooks, SavedStates
from ..policy import Policy
from ..records import Step
from ..recovery.skipping import not_withheld_reason
from .anomaly_report import HISTORY_STEPS, top_layers, write_report
from .hang_report import write_hang_report
from .job_share import JOB_NOTE, JobScope, JobShare, checkpoint_reason, left_note
from .last_good import Damage, ResumeAdvice, advise, find_damage, lineage
from .run_history import DAMAGE_KINDS, RunHistory, SegmentFacts


class Responder:
    """Keeps what a report needs (the last steps, the latest hardware sample, the latest
    per-layer norms) and acts on each anomaly's policy."""

    def __init__(self, *, log_dir: str, rank: int, policy: Policy, framework: FrameworkHooks,
                 scope: JobScope | None = None):
        self.log_dir, self.rank, self.policy = log_dir, rank, policy
        self.framework = framework
        self.history: deque[Mapping[str, Any]] = deque(maxlen=HISTORY_STEPS)
        self.hardware: Mapping[str, Any] | None = None
        self.layer_norms: tuple[int, Mapping[str, float]] | None = None
        self._problems = OnceMessages()
        self._failed_checkpoint: str | None = None    # why the latest checkpoint is missing
        self._run_log = RunHistory(rank_log_path(log_dir, rank))
        # (step, kind) -> the first step of an anomaly found after it began (loss_rising's
        # onset), which its record does not keep
        self._onsets: dict[tuple[int, str], int] = {}
        # which of a job-level event's files this rank writes (the monitor hands its scope)
        # scope: what this rank sees of the others (the monitor's exchange); none: no other
        self.share = JobShare(rank=rank, policy=policy, framework=framework,
                              scope=scope or JobScope())
        self._tried_at: int | None = None       # the step of the latest anomaly checkpoint

    def pop_problems(self) -> list[str]:
        """Failed checkpoint and report writes not said before, each once per kind, and the
        resume advice of a report whose checkpoint holds damaged weights."""
        return self._problems.pop()

    def checkpoint(self, step: int, reason: str) -> str | None:
        """Save a checkpoint through the framework's hook; None when there is no hook or
        the save failed (said once)."""
        save = self.framework.save_checkpoint
        self._failed_checkpoint = None
        if save is None:
            return None
        if reason == "signal" and self.share.leaves_signal(step):
            self._problems.report(("left to rank 0", reason),
                                  f"the {reason} checkpoint at step {step} is rank 0's: every "
                                  "rank holds the same training state")
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
        share = self.share
        if share.see(fallback_step) and self.rank == 0:
            self._settle_job_step(fallback_step)
        checkpoint = None
        tried = False
        for anomaly in found:
            if not anomaly.actions:      # peer stops come with the originating rank's actions
                anomaly.actions = self.policy.actions_for(anomaly.kind)
            if anomaly.step is not None and anomaly.onset is not None \
                    and anomaly.onset < anomaly.step:
                self._onsets[(anomaly.step, anomaly.kind)] = anomaly.onset
            step = anomaly.step or fallback_step
            if share.leaves(anomaly, fallback_step):
                anomaly.message += left_note(anomaly)
                continue
            job = share.for_job(anomaly)
            if job and anomaly.kind == PEER_STOP and "checkpoint" not in anomaly.actions \
                    and share.checkpoint_asked(step):      # it follows a stop that asks none
                anomaly.actions = ["checkpoint", *anomaly.actions]
            if "checkpoint" in anomaly.actions:
                if not tried:
                    checkpoint, tried = self.checkpoint(
                        step, checkpoint_reason(anomaly) if job else "anomaly"), True
                    self._tried_at = step
                anomaly.checkpoint = checkpoint
            if anomaly.actions != ["warn"]:
                section = share.section(step, [anomaly]) if job else None
                anomaly.report = self._report(anomaly, found, section)
                if section is not None and anomaly.report:
                    share.keep(anomaly, section, anomaly.report, step)

    def _report(self, anomaly: Anomaly, found: Sequence[Anomaly],
                job: dict[str, Any] | None = None, path: str | None = None) -> str | None:
        """Write ``anomaly``'s report (at ``path``: again, over the one written there) with
        its resume advice; ``job``: the job's section (rank 0's report of a job-level
        event)."""
        resume_hint = self.framework.resume_hint
        advice = self.resume_advice(anomaly, found)
        target = advice.path if advice is not None else None
        report = self._write_report(anomaly, advice,
                                    resume_hint(target) if target and resume_hint else None,
                                    job=job, stem=path[:-len(".json")] if path else None)
        # the console's line names the checkpoint ("-> <path>"): when its weights are
        # damaged, a note says where to resume from instead
        if anomaly.checkpoint and advice is not None and advice.damage is not None:
            self._problems.report(("resume", anomaly.step, anomaly.kind),
                                  f"{anomaly.kind} at step {anomaly.step}: {advice.text}")
        return report

    def _settle_job_step(self, step: int) -> None:
        """Rank 0, after ``step``'s exchange: its reports of the job written before it are
        written again naming what the other ranks found, with the checkpoint another rank's
        policy asked for when rank 0's own did not (its record, written already, is null;
        the job log's event and a notice name it)."""
        written = self.share.take(step)
        own = [anomaly for anomaly, _, _ in written]
        added = bool(own) and self._tried_at != step and self.share.checkpoint_asked(step)
        if added:
            self._tried_at, path = step, self.checkpoint(step, "anomaly")
            for anomaly in own:
                anomaly.checkpoint, anomaly.actions = path, ["checkpoint", *anomaly.actions]
            if path is not None:
                self._problems.report(("job checkpoint", step),
                                      f"step {step}: another rank's policy asked for a "
                                      f"checkpoint; the job's is {path}")
        for anomaly, section, report in written:
            now = self.share.section(step, own)
            if now != section or added:
                self._report(anomaly, own, now, report)

    def _write_report(self, anomaly: Anomaly, advice: ResumeAdvice | None, resume: str | None,
                      job: dict[str, Any] | None, stem: str | None) -> str | None:
        notes = self._notes(anomaly, advice) + ([JOB_NOTE] if job is not None else [])
        return self._guarded(f"the anomaly report for step {anomaly.step}", lambda: write_report(
            log_dir=self.log_dir, rank=self.rank, anomaly=anomaly,
            history=list(self.history), hardware=self.hardware,
            notes=notes, top_layers=top_layers(anomaly, self.layer_norms), resume_snippet=resume,
            resume_from=advice.as_record() if advice is not None else None, job=job,
            stem=stem))

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

    def _not_withheld(self, anomaly: Anomaly) -> str:
        """Why the anomalous step's update went through, and what the user can change."""
        unprotected = self.framework.unprotected
        if unprotected is None:         # a framework that says nothing of withholding
            return ("nothing withheld it: the step was observed with skipped=False after its "
                    "update")
        return unprotected() or not_withheld_reason(anomaly.kind,
                                                    self.policy.policy_for(anomaly.kind))

    def _damage_notes(self, anomaly: Anomaly, withheld: bool | None, damage: Damage,
                      advice: ResumeAdvice) -> list[str]:
        """The checkpoint's weights hold an anomalous update: which, the last good state
        that exists (or that none does), and who saves the damaged weights again (said
        once on the console too)."""
        step = anomaly.step
        if withheld is False and anomaly.kind in DAMAGE_KINDS:     # its own update is bad
            earlier = "" if damage.onset == step else \
                f", and the damage began before it: {damage.why}"
            notes = [f"the checkpoint's weights INCLUDE step {step}'s update "
                     f"({self._not_withheld(anomaly)}){earlier}"]
        elif withheld:
            notes = [f"step {step}'s update was withheld, but the checkpoint's weights "
                     f"already hold an anomalous update: {damage.why}"]
        else:
            held = "the checkpoint's weights hold" if anomaly.checkpoint else "the weights hold"
            notes = [f"{held} an anomalous update: {damage.why}"]
        if advice.path is not None:
            notes.append(f"the last good state on disk is {advice.path} (saved after step "
                         f"{advice.step}); resume from it, not from this checkpoint")
        else:
            notes.append(f"no training state saved before step {damage.onset} exists")
        saved = self.saved_states()
        if saved.saves_at_end:
            later = (f"{saved.saves_at_end} saves the weights again when training ends: that "
                     f"newest file INCLUDES step {damage.onset}'s update too")
            notes.append(later)
            self._problems.report(("saves_at_end",), later)     # said once on the console
        return notes

    def saved_states(self) -> SavedStates:
        hook = self.framework.saved_states
        return hook() if hook is not None else SavedStates()

    def _update_withheld(self, anomaly: Anomaly) -> bool | None:
        """Whether the anomaly's checkpoint left its step's update out: True (the last good
        weights), False (it holds that update), None (no checkpoint, or not of that step)."""
        if not anomaly.checkpoint:
            return None
        return self._withheld(anomaly.step)

    def _withheld(self, step: int | None) -> bool | None:
        """Whether ``step``'s update was withheld; None when it is not the latest step."""
        last: Mapping[str, Any] | None = self.history[-1] if self.history else None
        if step is None or last is None or last.get(Step.STEP) != step:
            return None
        return bool(last.get(Step.SKIPPED))

    def resume_advice(self, anomaly: Anomaly, found: Sequence[Anomaly] = ()
                      ) -> ResumeAdvice | None:
        """Where to resume from after ``anomaly`` (``found``: the anomalies of its step not
        in the run log yet): its checkpoint when no anomalous update reached the weights,
        else the newest saved state from before the damage began (last_good.py); None
        when nothing is known to resume from."""
        step, withheld = anomaly.step, self._update_withheld(anomaly)
        damage: Damage | None = None
        segments: list[SegmentFacts] = []
        if step is not None:
            applied = not self._withheld(step)          # unknown: taken as applied
            here = [(a.step, a.kind) for a in (anomaly, *found)
                    if a.step == step and a.kind in DAMAGE_KINDS and applied]
            kind = anomaly.origin[1] if anomaly.kind == PEER_STOP and anomaly.origin \
                else anomaly.kind
            segments = self._run_log.read()
            damage = find_damage(segments, step=step, kind=kind, here=here,
                                 onsets=self._onsets)
        held = None if withheld is None or step is None else step - int(withheld)
        return advise(damage, self.saved_states().states, _checkpoints(segments),
                      checkpoint=anomaly.checkpoint, held=held)

    def _notes(self, anomaly: Anomaly, advice: ResumeAdvice | None) -> list[str]:
        notes = self.framework.report_notes()
        withheld = self._update_withheld(anomaly)
        damage = advice.damage if advice is not None else None
        if damage is not None and advice is not None:
            notes += self._damage_notes(anomaly, withheld, damage, advice)
        elif withheld:
            notes.append(f"the checkpoint holds the last good weights: step {anomaly.step}'s "
                         "update was withheld")
        if "checkpoint" in anomaly.actions and self._failed_checkpoint is not None:
            notes.append(f"the checkpoint could not be written: {self._failed_checkpoint}")
        elif "checkpoint" in anomaly.actions and anomaly.checkpoint is None:
            notes.append("no checkpoint was written: no weights are known to this monitor "
                         "(use mindwatch.mindspore.TrainMonitor, or build the Monitor with "
                         "framework=FrameworkHooks(save_checkpoint=...))")
        return notes


def _checkpoints(segments: list[SegmentFacts]) -> list[tuple[int, str]]:
    """mindwatch's checkpoints of earlier stops that the current weights descend from, still
    on disk: ``(the step whose state each holds, path)``."""
    found = []
    for index, upto in lineage(segments):
        found += [(held, path) for held, path in segments[index].checkpoints
                  if held <= upto and os.path.exists(path)]
    return found
