"""Where to resume from: the newest saved state from before the damage in the weights began.

A stop's checkpoint holds good weights only when nothing anomalous reached them: its own
step's update withheld is not enough when an earlier one went through. Where the damage began
(its onset) is found in two ways, from the run log's segments (run_history.py):

(a) Evidence. An anomaly of ``DAMAGE_KINDS`` whose step's update was applied put damage into
    the weights: a warned spike, an ``lr_anomaly`` or ``update_ratio`` let through,
    ``loss_rising`` (from its onset), the stopping step's own when it was not withheld.
    Going back from the stopping step, each one within ``ONSET_WINDOW`` steps of the next
    joins the fault; the earliest is the onset. Older ones are taken for faults the run got
    over: a report shows the last 50 steps, and the onset is among them or chained to them.
    Only the updates the weights hold count: those of the current segment, then of the
    segment it resumed from (the latest earlier one that reached its resume point) up to
    that point, and so on; a rewind takes back what came after its snapshot.
(b) Repetition. The same kind stopped an earlier segment at the same step, or at a step after
    the one this segment resumed from: the state it resumed from already held the damage, though
    no anomaly was found where it was made. The onset is then the first update of the segment
    that made that state (further back while that segment repeated a stop too), unless (a)
    found it within that stretch.

The last good state is the newest saved state whose step is before the onset: the
framework's own files (``SavedStates``) or mindwatch's checkpoints of earlier stops along the
same lineage. At the same step the framework's file is named: it resumes the whole loop.
"""
from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..basics import format as fmt
from .anomaly_report import HISTORY_STEPS
from .run_history import SegmentFacts

ONSET_WINDOW = HISTORY_STEPS
# The JSON report's ``resume_from`` fields
PATH, STEP, ONSET, WHY = "path", "step", "onset", "why"


@dataclass(frozen=True)
class Damage:
    onset: int          # the first step whose anomalous update the weights hold
    why: str            # what put it there, one clause


@dataclass(frozen=True)
class ResumeAdvice:
    """What the report says to resume from: ``path`` holds the state after ``step``
    (None: no good state is known); ``text``, one sentence, says which and why."""

    path: str | None
    step: int | None
    damage: Damage | None
    text: str

    def as_record(self) -> dict[str, Any]:
        return {PATH: self.path, STEP: self.step,
                ONSET: None if self.damage is None else self.damage.onset, WHY: self.text}


def lineage(segments: Sequence[SegmentFacts]) -> list[tuple[int, float]]:
    """``(index, last step)`` of each segment whose updates the current weights hold, the
    current (last) one first: each is the latest earlier segment that reached the step the
    one before it resumed from, counted up to that step."""
    if not segments:
        return []
    chain: list[tuple[int, float]] = [(len(segments) - 1, math.inf)]
    resume = segments[-1].resumed_after
    for index in range(len(segments) - 2, -1, -1):
        if not resume:                     # None, or 0: the initial weights
            break
        segment = segments[index]
        if segment.resumed_after is not None and segment.last_step is not None \
                and segment.resumed_after < resume <= segment.last_step:
            chain.append((index, resume))
            resume = segment.resumed_after
    return chain


def _undone(segment: SegmentFacts, step: int, upto: float) -> bool:
    """Whether a rewind of ``segment`` took ``step``'s update back out of the weights."""
    return any(to < step <= at <= upto for at, to in segment.rewinds)


def _evidence(segments: Sequence[SegmentFacts], chain: Sequence[tuple[int, float]],
              here: Iterable[tuple[int, str]]) -> list[tuple[int, str]]:
    """The anomalous updates the weights hold, ``here`` (the stopping step's own) with
    those of the log, newest first."""
    found = set(here)
    for index, upto in chain:
        segment = segments[index]
        found.update((step, kind) for step, kind in segment.damage
                     if step <= upto and not _undone(segment, step, upto))
    return sorted(found, key=lambda item: (-item[0], item[1]))


def _repeats(segments: Sequence[SegmentFacts], index: int, step: int, kind: str) -> int | None:
    """The latest segment before ``index`` that ``kind`` stopped at ``step``, or after the
    step segment ``index`` resumed from; None."""
    resumed = segments[index].resumed_after
    if not resumed:
        return None
    for earlier in range(index - 1, -1, -1):
        if any(k == kind and (s == step or s > resumed) for s, k in segments[earlier].stops):
            return earlier
    return None


def find_damage(segments: Sequence[SegmentFacts], *, step: int, kind: str,
                here: Iterable[tuple[int, str]],
                onsets: Mapping[tuple[int, str], int]) -> Damage | None:
    """Where the damage in the weights at ``step`` (where ``kind`` stopped) began, and why
    (module docstring); None when none is known. ``here``: the stopping step's anomalous
    updates applied; ``onsets``: the first step of anomalies found after their start
    (``loss_rising``), by ``(step, kind)``."""
    chain = lineage(segments)
    cause: tuple[int, str] | None = None
    reach = step
    for found_at, found_kind in _evidence(segments, chain, here):
        if reach - found_at > ONSET_WINDOW:
            break
        cause = (found_at, found_kind)
        reach = min(reach, onsets.get(cause, found_at))
    evidence = None if cause is None else Damage(reach, _what(cause, reach, step))
    if not chain:
        return evidence
    repeated = _repeats(segments, chain[0][0], step, kind)
    resumed = segments[chain[0][0]].resumed_after
    if repeated is None or resumed is None or (evidence is not None
                                               and evidence.onset <= resumed):
        return evidence
    # the state resumed from was made by the segment before in the chain, from its first
    # update on; while that one repeated a stop too, by the one before it; a state no
    # segment of the log made is suspect itself
    onset = resumed
    for index, _ in chain[1:]:
        made_from = segments[index].resumed_after or 0
        if _repeats(segments, index, step, kind) is None:
            onset = made_from + 1
            break
        onset = made_from
    earlier = segments[repeated]
    first = next(s for s, k in earlier.stops if k == kind and (s == step or s > resumed))
    return Damage(max(onset, 1), (
        f"{kind} stopped the run at step {first} before (the segment resumed after step "
        f"{earlier.resumed_after}) and again at step {step} after resuming from the state "
        f"after step {resumed}: that state already held the damage, made from step "
        f"{max(onset, 1)} on (were step {step}'s batch the cause instead, any earlier state "
        f"would meet it again: skip it)"))


def _what(cause: tuple[int, str], onset: int, step: int) -> str:
    found_at, kind = cause
    if onset < found_at:
        what = f"{kind} at step {found_at} found the loss rising since step {onset}"
    else:
        what = f"step {found_at}'s update went into the weights though {kind} was found there"
    return what if found_at == step else \
        f"{what}, {fmt.count(step - found_at, 'step')} before this stop"


def advise(damage: Damage | None, saved: Iterable[tuple[int, str]],
           checkpoints: Iterable[tuple[int, str]], *, checkpoint: str | None,
           held: int | None) -> ResumeAdvice | None:
    """The advice: with no damage, the anomaly's own ``checkpoint`` (holding the state after
    ``held``), when there is one; else the newest state before the onset among the
    framework's ``saved`` and mindwatch's earlier ``checkpoints`` (``(step, path)``)."""
    if damage is None:
        if checkpoint is None:
            return None
        return ResumeAdvice(checkpoint, held, None, f"resume from {checkpoint}: no anomalous "
                            "update reached its weights")
    onset = damage.onset
    # the framework's first at the same step (ranked 1): it resumes the whole loop
    ranked = [(step, 1, path) for step, path in saved if step < onset]
    ranked += [(step, 0, path) for step, path in checkpoints if step < onset]
    if not ranked:
        return ResumeAdvice(None, None, damage, (
            f"no training state saved before step {onset} exists ({damage.why}): restart "
            f"from the initial weights, or from a checkpoint you know is good from before "
            f"step {onset}"))
    step, _, path = max(ranked)
    instead = ", not from the checkpoint" if checkpoint else ""
    return ResumeAdvice(path, step, damage, (
        f"resume from {path} (saved after step {step}), the newest state from before step "
        f"{onset}{instead}: {damage.why}"))
