"""``resume=True`` in a new process: the run goes on with the history its rules need, read
from its own run log, so its first step is judged as the run's next one (a mistyped LR on a
resume is an ``lr_anomaly``, withheld on that step; a loss spike at it is a ``loss_spike``).

What the log gives back (``runlog/run_tail.py`` reads it):

- the last step records, replayed through every detector's ``update`` (and the last state
  records through ``update_state``) as the monitor fed them, findings discarded and nothing
  written: the spike windows and episodes, ``loss_rising``'s windows and noise history,
  ``gradient_vanish``'s streak, ``update_ratio``'s per-layer bands; each rule keeps what it
  keeps, so one that is added later is warmed up too. Replayed observations carry
  ``segment_step=0``: the pace rules (``throughput_drop``, ``data_bound``) leave them out and
  learn each segment's pace anew, as they do in one process;
- ``SkipGuard.review`` of the same steps: the updates withheld in the last 100 steps count
  towards ``max_skips`` across the restart; then the limits, pushed to the protected step
  before its first update (``Monitor._begin_training``);
- the whole run's LR peak, replayed first as an observation that carries only that LR (a
  step before the tail that applied it): ``lr_anomaly`` judges the first step against it;
- the smoothed loss (the last step record's ``loss_smooth``), the last epoch's mean loss,
  the rewinds so far (``max_rewinds``), the last step.

Hardware rules start afresh (a new process, maybe another device): nothing is replayed
through them, nor reset when the history is restored again (the sampler thread feeds them
by then). A ``load_state_dict`` given before the first step replaces all of it
(``Monitor.load_state_dict``).

The history is read and restored when the monitor is built, so that anything that reads the
limits before training begins (``wrap``, ``protect``) has them. When a trainer says where it
resumes (``Monitor.start(after_step=...)``: Hugging Face's and Lightning's global step,
MindFormers' resumed step) and the log holds steps after it (its checkpoint is older than
the crash), the history is restored again without them. Said once, in a ``notice``.
"""
from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

from .. import records
from ..basics.numbers import to_number
from ..detectors import Detector
from ..detectors.loss_rising import NOISE_HISTORY
from ..detectors.update_ratio import UpdateRatioDetector
from ..observation import StepObservation
from ..records import Common, State, Step
from ..recovery.rewinding import RewindGuard
from ..recovery.skipping import ESCALATION_STEPS, SkipGuard
from ..runlog.lines import RunLogError
from ..runlog.run_tail import Lineage, RunTail
from ..settings import MonitorSettings
from .loss_stats import LossStats


def steps_needed(settings: MonitorSettings) -> int:
    """Step records of applied updates the rules read back: the spike windows,
    ``loss_rising``'s window and the step-to-step differences it measures its noise on,
    the escalation's steps, the vanishing streak."""
    return max(settings.spike_window, settings.loss_rising_window * NOISE_HISTORY + 1,
               ESCALATION_STEPS, settings.grad_vanish_steps)


class ResumedHistory:
    """``read`` at construction (restores the history at once); ``begin`` at the first
    segment's start, once: restores it again from where a trainer resumes, and returns the
    notice to say; ``last_step`` then is the run's."""

    def __init__(self, path: str, *, resume: bool, tail: RunTail | None, problem: str | None,
                 detectors: Sequence[Detector], loss_stats: LossStats, skips: SkipGuard,
                 rewinds: RewindGuard):
        self.path, self.resume, self._tail, self._problem = path, resume, tail, problem
        # the rules of the training; the hardware's are the sampler thread's (from the
        # first start on) and start afresh in a new process anyway
        self._detectors = [d for d in detectors if not d.watches_hardware]
        self._loss_stats, self._skips, self._rewinds = loss_stats, skips, rewinds
        # the parts as built, to go back to before restoring again (a trainer's resume)
        self._fresh = None if tail is None else (
            [d.state_dict() for d in self._detectors], skips.state_dict())
        self.lineage: Lineage | None = None

    @classmethod
    def read(cls, path: str, settings: MonitorSettings, *, detectors: Sequence[Detector],
             loss_stats: LossStats, skips: SkipGuard, rewinds: RewindGuard) -> ResumedHistory:
        """The history of the run log at ``path`` (with ``resume=True``), restored."""
        tail, problem = None, None
        if settings.resume and os.path.isfile(path) and os.path.getsize(path) > 0:
            states = max((d.window for d in detectors if isinstance(d, UpdateRatioDetector)),
                         default=0)
            try:
                tail = RunTail(path, steps=steps_needed(settings), states=states).read()
            except RunLogError as exc:
                problem = str(exc)
        resumed = cls(path, resume=settings.resume, tail=tail, problem=problem,
                      detectors=detectors, loss_stats=loss_stats, skips=skips,
                      rewinds=rewinds)
        resumed.restore()
        return resumed

    @property
    def last_step(self) -> int | None:
        return None if self.lineage is None else self.lineage.last_step

    def restore(self, after_step: int | None = None) -> None:
        """The parts as built, then the log's history up to ``after_step`` (None: all)."""
        if self._tail is None:
            return
        if self.lineage is not None and self._fresh is not None:
            detector_states, skips_state = self._fresh
            for detector, state in zip(self._detectors, detector_states, strict=True):
                detector.load_state_dict(state)
            self._skips.load_state_dict(skips_state)
        self.lineage = lineage = self._tail.lineage(after_step)
        self._replay(lineage)
        self._loss_stats.resume(smooth=lineage.loss_smooth, previous_mean=lineage.epoch_mean)
        self._rewinds.rewinds = lineage.rewinds

    def begin(self, after_step: int | None) -> str | None:
        """At the first segment's start (``after_step``: where a trainer resumes, 0 or None
        when it does not say): restores the history without the log's steps after
        ``after_step``, and returns the notice to say (None: nothing to say)."""
        lineage = self.lineage
        if lineage is not None and after_step and lineage.last_step is not None \
                and after_step < lineage.last_step:
            self.restore(after_step)
        tail, name = self._tail, os.path.basename(self.path)
        self._tail = None                               # nothing more to restore from
        if self._problem is not None:
            return (f"resume=True: the run log's history could not be read ({self._problem}); "
                    "the rules start without it")
        lineage = self.lineage
        if lineage is None or tail is None:
            if not after_step:
                return None
            why, how = ((f"{self.path} held no run log before this one",
                         "point log_dir at the run's own directory") if self.resume else
                        ("resume=False", "build it on the run's log_dir with resume=True"))
            return (f"training resumes after step {after_step}, but this monitor has no "
                    f"history of the run ({why}): its rules start with empty windows and no "
                    "LR peak, so a wrong LR at the first step goes unseen; "
                    f"{how} to keep the run's history")
        if lineage.last_step is None:
            return f"resume=True: {name} holds no step record, so the rules start without history"
        return _said(lineage, name, after_step, self._skips)

    def _replay(self, lineage: Lineage) -> None:
        detectors, skips = self._detectors, self._skips
        steps = [r for r in lineage.records if r.get(Common.KIND) == records.STEP]
        if lineage.lr_peak is not None:
            # the peak, as the step before the tail that applied it: what lr_anomaly keeps
            first = steps[0].get(Step.STEP) if steps else lineage.last_step
            peak = StepObservation(step=max(first - 1, 1) if isinstance(first, int) else 1,
                                   lr=lineage.lr_peak, segment_step=0)
            for detector in detectors:
                detector.update(peak)
        for record in lineage.records:
            if record.get(Common.KIND) == records.STEP:
                observation = _observation(record)
                if observation is not None:
                    for detector in detectors:
                        detector.update(observation)
                    skips.review(observation, [])
                continue
            step, layers = record.get(State.STEP), record.get(State.LAYERS)
            activations = record.get(State.ACTIVATIONS)
            if isinstance(step, int) and isinstance(layers, Mapping):
                for detector in detectors:
                    detector.update_state(step, layers, activations
                                          if isinstance(activations, Mapping) else None)
        skips.refresh()


def _said(lineage: Lineage, name: str, after_step: int | None, skips: SkipGuard) -> str:
    """The notice of what was restored."""
    restored = [f"the LR peak {lineage.lr_peak:.3g}" if lineage.lr_peak is not None
                else "no LR peak (no update applied with an LR)"]
    if lineage.loss_smooth is not None:
        restored.append(f"the smoothed loss {lineage.loss_smooth:.4g}")
    withheld = len(skips.state_dict().get("withheld_steps", []))
    if withheld:
        restored.append(f"{withheld} updates withheld in the last {ESCALATION_STEPS} steps")
    if lineage.rewinds:
        restored.append(f"{lineage.rewinds} rewinds")
    message = (f"resumed after step {lineage.last_step}: the history of the last "
               f"{lineage.steps} steps restored from {name} (the rules' windows, "
               f"{', '.join(restored)})")
    if lineage.left_out and after_step:
        message += (f"; the log's {lineage.left_out} step records after step {after_step}, "
                    "where training resumes, left out")
    elif lineage.left_out:
        message += f"; {lineage.left_out} step records a rewind undid left out"
    return message


def _observation(record: Mapping[str, Any]) -> StepObservation | None:
    """A step record as the observation the monitor fed its rules (not this segment's)."""
    step = record.get(Step.STEP)
    if type(step) is not int or step < 1:
        return None
    groups = record.get(Step.LR_GROUPS)
    steps = record.get(Step.STEPS_COVERED)
    return StepObservation(
        step=step, epoch=_count(record.get(Step.EPOCH)),
        epoch_step=_count(record.get(Step.EPOCH_STEP)),
        steps_per_epoch=_count(record.get(Step.STEPS_PER_EPOCH)),
        loss=to_number(record.get(Step.LOSS)), lr=to_number(record.get(Step.LR)),
        lr_groups=[to_number(v) for v in groups] if isinstance(groups, list) else None,
        grad_norm=to_number(record.get(Step.GRAD_NORM)),
        step_time_s=to_number(record.get(Step.STEP_TIME_S)),
        samples_per_s=to_number(record.get(Step.SAMPLES_PER_S)),
        data_time_s=to_number(record.get(Step.DATA_TIME_S)),
        skipped=record.get(Step.SKIPPED) is True, steps=_count(steps) or 1,
        time=to_number(record.get(Common.TIME)) or 0.0, segment_step=0)


def _count(value: Any) -> int | None:
    return value if type(value) is int and value >= 1 else None
