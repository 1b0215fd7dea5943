"""What this rank's run log says of where the training state came from, for the resume advice
(last_good.py): each run segment's resume point, the anomalous updates it applied, what stopped
it, its rewinds and mindwatch's own checkpoints.

The log is the only record that outlives a process: a run resumed from a checkpoint in a new
process knows its earlier segments from there alone. It is read incrementally: records are
only ever appended, so each read takes the bytes written since the last one (a torn line waits
in the decoder for its end), and a run's log is read once over its life, a part at each report
(never at a healthy step). The current step's own anomalies are not in it yet: the responder
hands them in.
"""
from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, TypeGuard

from .. import records
from ..anomaly import UPDATE_RATIO
from ..policy import REWINDABLE_KINDS
from ..records import Anomaly, Common, End, Rewind, Step, StoppedBy
from ..runlog.lines import LineDecoder, RunLogError

# Kinds that say the update of their step was anomalous, or that the weights already are:
# the faults of the training state a rewind can cure, and a layer torn by its update. An
# anomaly of one of these whose step's update was applied put damage into the weights.
DAMAGE_KINDS = frozenset((*REWINDABLE_KINDS, UPDATE_RATIO))
CHUNK_BYTES = 4 * 2**20
# Step records remembered per segment to tell whether an anomaly's update was applied: its
# records follow its step's within the same step end, so a few steps back always suffice.
RECENT_STEPS = 256


@dataclass
class SegmentFacts:
    """One run segment (``run`` ... ``end``) as the resume advice reads it. Steps are the
    framework's global steps; a state "after step N" holds the updates up to N."""

    # the state it started from: its first step record's step less the steps it covered
    resumed_after: int | None = None
    last_step: int | None = None
    damage: list[tuple[int, str]] = field(default_factory=list)   # (step, kind), applied
    stops: list[tuple[int, str]] = field(default_factory=list)    # (step, kind) that stopped it
    rewinds: list[tuple[int, int]] = field(default_factory=list)  # (at step, back to step)
    # mindwatch's own checkpoints: (the step whose state it holds, path)
    checkpoints: list[tuple[int, str]] = field(default_factory=list)
    # step -> whether its update was withheld, for the latest RECENT_STEPS steps
    _skipped: OrderedDict[int, bool] = field(default_factory=OrderedDict, repr=False)

    def applied(self, step: int) -> bool:
        """Whether ``step``'s update reached the weights (unknown: taken as applied, so that
        no advice names weights that might hold it)."""
        return not self._skipped.get(step, False)


class RunHistory:
    """The segments of the run log at ``path``, read on from where the last call stopped."""

    def __init__(self, path: str):
        self.path = path
        self.segments: list[SegmentFacts] = []
        self._offset = 0
        self._decoder = LineDecoder(path)

    def read(self) -> list[SegmentFacts]:
        """Every segment so far, the latest last. A log that cannot be read (gone, not a
        run log) leaves what was read before: the advice then knows less, and says only
        what it knows."""
        try:
            with open(self.path, "rb") as handle:
                handle.seek(self._offset)
                while chunk := handle.read(CHUNK_BYTES):
                    self._offset += len(chunk)
                    for record in self._decoder.feed(chunk):
                        self._add(record)
        except (OSError, RunLogError):
            pass
        return self.segments

    def _add(self, record: Mapping[str, Any]) -> None:
        kind = record.get(Common.KIND)
        if kind == records.RUN or not self.segments:
            self.segments.append(SegmentFacts())
        segment = self.segments[-1]
        if kind == records.STEP:
            _add_step(segment, record)
        elif kind == records.ANOMALY:
            _add_anomaly(segment, record)
        elif kind == records.REWIND and _is_step(record.get(Rewind.STEP)) \
                and _is_step(record.get(Rewind.TO_STEP)):
            segment.rewinds.append((record[Rewind.STEP], record[Rewind.TO_STEP]))
        elif kind == records.END:
            _add_stop(segment, record.get(End.STOPPED_BY))


def _add_step(segment: SegmentFacts, record: Mapping[str, Any]) -> None:
    step = record.get(Step.STEP)
    if not _is_step(step):
        return
    if segment.resumed_after is None:
        covered = record.get(Step.STEPS_COVERED)
        segment.resumed_after = step - (covered if _is_step(covered) else 1)
    segment.last_step = step
    segment._skipped[step] = bool(record.get(Step.SKIPPED))
    segment._skipped.move_to_end(step)
    while len(segment._skipped) > RECENT_STEPS:
        segment._skipped.popitem(last=False)


def _add_anomaly(segment: SegmentFacts, record: Mapping[str, Any]) -> None:
    step, kind = record.get(Anomaly.STEP), record.get(Anomaly.ANOMALY)
    if not _is_step(step) or not isinstance(kind, str):
        return
    if kind in DAMAGE_KINDS and segment.applied(step):
        segment.damage.append((step, kind))
    actions = record.get(Anomaly.ACTIONS)
    if isinstance(actions, list) and "stop" in actions:
        _add_stop(segment, {StoppedBy.ANOMALY: kind, StoppedBy.STEP: step})
    checkpoint = record.get(Anomaly.CHECKPOINT)
    if isinstance(checkpoint, str) and checkpoint:
        held = step if segment.applied(step) else step - 1
        if (held, checkpoint) not in segment.checkpoints:
            segment.checkpoints.append((held, checkpoint))


def _add_stop(segment: SegmentFacts, stopped_by: Any) -> None:
    """A stop (the anomaly record's, or the ``end`` record's ``stopped_by``: on a rank that
    only followed another's stop, the origin's kind), each once."""
    if not isinstance(stopped_by, Mapping):
        return
    step, kind = stopped_by.get(StoppedBy.STEP), stopped_by.get(StoppedBy.ANOMALY)
    if _is_step(step) and isinstance(kind, str) and (step, kind) not in segment.stops:
        segment.stops.append((step, kind))


def _is_step(value: Any) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0

