"""What a run resumed in a new process (``resume=True``) takes from its own run log: the tail
of its steps, for the rules' windows, and the few figures of the whole run no tail holds.

One pass over the log (``RunTail.read``) keeps, per step line, its step, the highest LR of an
applied update, whether its update was withheld, and where the line is in the file (33
bytes a step line: 6.6 MB for 200,000 steps); per state line its step and place; every
``rewind`` and ``epoch`` record's figures. Nothing else is kept: the records the rules get
back, a few hundred lines, are read again from their places (``lineage``). The whole run is
read for the LR peak (the ``lr_anomaly`` rule's): a schedule peaks at the end of its
warm-up and a warm restart goes back up to that peak, so a peak taken from the tail alone
(a run resumed late in its decay) would call a healthy restart a wrong LR. With msgspec each
line is decoded into the few fields the pass reads (a step line's step, LR, group LRs and
``skipped``; a state line's step), the rest skipped without being built; without it the
standard ``json`` module reads step lines, and the ``step`` of the writer's state lines is
taken from their first bytes. Measured on a 200,000-step log: benchmarks/resume_history.py
(its docstring has the figures).

``lineage(after_step)``: the run as it went on. A record that a later one undid is left out:
the steps after a ``rewind`` record's ``to_step`` that came before it (the rewind restored an
earlier state, the rules' windows too), and, when a trainer resumes after ``after_step`` (its
checkpoint's step), the log's steps after it. Only the newest such span is found; an older
abandoned branch stays in (its values are of the same run, and a window reaches a few
hundred steps). A MindSpore ``Model.train`` counts its steps from 1 again in every call: its
``after_step`` is 0, and no step is left out, as one process that carries on keeps every
segment's history.

Bad lines are skipped as the reader skips them (``lines.LineDecoder``); a file whose first
record is no ``run`` record raises ``RunLogError``.
"""
from __future__ import annotations

import math
import os
import re
from array import array
from bisect import bisect_left
from dataclasses import dataclass, field
from functools import reduce
from itertools import accumulate
from operator import or_
from typing import Any

from .. import records
from ..basics.numbers import to_number
from ..records import Common, Epoch, Rewind, State, Step
from . import fast
from .lines import MAX_LINE_BYTES, LineDecoder, Record, RunLogError
from .reader import CHUNK_BYTES

NO_LR = -math.inf          # a step line that raises no peak (withheld, no LR, non-finite)
TAIL_FACTOR = 4            # step lines read back at most, per step the rules need
INF = math.inf
# Without msgspec: lines the writer starts so are not decoded whole (a state line is as
# long as a hundred step lines; the pass needs only its step, among its first bytes)
_STATE_START, _HARDWARE_START = b'{"kind":"state",', b'{"kind":"hardware",'
_STATE_STEP = re.compile(rb'"step":(\d+)[,}]')
STATE_HEAD = 256


@dataclass
class Lineage:
    """What the rules get back: ``records``, the step and state records of the tail of the
    run as it went on, in file order; the whole run's figures up to its last step."""
    path: str
    records: list[Record] = field(default_factory=list)
    steps: int = 0                      # step records among ``records``
    last_step: int | None = None        # the newest step record's (left-out ones aside)
    loss_smooth: float | None = None    # its smoothed loss
    lr_peak: float | None = None        # highest LR of an applied update (None: none yet)
    epoch_mean: float | None = None     # the last epoch record's finite mean loss
    rewinds: int = 0                    # rewind records of the run (left-out ones aside)
    left_out: int = 0                   # step records after after_step or undone by a rewind


class RunTail(LineDecoder):
    """One pass over ``path`` (``read``); ``steps``, ``states``: how many step records of
    applied updates and state records the rules need."""

    def __init__(self, path: str, *, steps: int, states: int):
        super().__init__(path)
        self.steps_needed, self.states_needed = steps, states
        self.size = 0                 # bytes read
        self._steps = array("d")      # every step line's step (NaN: not an int)
        self._peaks = array("d")      # every step line's highest applied LR (NO_LR: none)
        self._withheld = bytearray()  # every step line's ``skipped``
        self._starts = array("q")     # every step line's offset in the file
        self._lengths = array("q")    # and its length, without the newline
        # (step lines before it, step, offset, length) of every state line
        self._states: list[tuple[int, float, int, int]] = []
        self._rewinds: list[tuple[int, float, float]] = []     # (before, step, to_step)
        self._epochs: list[tuple[int, float]] = []             # (before, finite loss_mean)
        self._fields = None if self.fast is None else _Fields()

    def read(self) -> RunTail:
        """The pass; raises RunLogError for a file that cannot be read or is no run log."""
        pending, discarding = b"", False      # the line the last chunk ended inside
        try:
            with open(self.path, "rb") as handle:
                while chunk := handle.read(CHUNK_BYTES):
                    lines = chunk.split(b"\n")
                    rest = lines.pop()            # no newline after it yet
                    start = self.size - len(pending)          # the offset of lines[0]
                    self.size += len(chunk)
                    if not lines:
                        pending = b"" if discarding else pending + rest
                    else:
                        if discarding:         # the end of a line over MAX_LINE_BYTES
                            discarding = False
                            self.line += 1
                            self._skip(self.line, f"longer than {MAX_LINE_BYTES} bytes")
                            start += len(lines[0]) + 1
                            del lines[0]
                        elif pending:
                            lines[0] = pending + lines[0]
                        if lines:
                            self._block(lines, start)
                        pending = rest
                    if len(pending) > MAX_LINE_BYTES:
                        pending, discarding = b"", True
        except OSError as exc:
            raise RunLogError(f"cannot read {self.path}: {exc.strerror or exc}") from exc
        if discarding:
            self.line += 1
            self._skip(self.line, f"longer than {MAX_LINE_BYTES} bytes")
        elif pending.strip():          # a last line a crash cut, or one without its newline
            self._block([pending], self.size - len(pending))
        self.check(final=True)
        return self

    # -- the pass ----------------------------------------------------------------------------
    def _block(self, lines: list[bytes], start: int) -> None:
        """Whole lines, the first at offset ``start``."""
        starts = list(accumulate([len(raw) + 1 for raw in lines], initial=start))
        first_line = self.line + 1
        self.line += len(lines)
        fields = self._fields
        items: list[Any]
        if fields is None:
            items = [self._standard(raw, first_line + i) for i, raw in enumerate(lines)]
        else:
            items = [None] * len(lines)
            skip = 1 if self._first else 0       # the first record decides: a run log?
            items[skip:] = fields.decode_all(lines[skip:])
            for i in [i for i, item in enumerate(items) if item is None]:
                items[i] = self._record(lines[i], first_line + i)
            self.records += sum(1 for item in items if type(item) is not dict
                                and item is not None)
        for i in [i for i, item in enumerate(items) if type(item) is dict]:
            items[i] = _from_record(fields, items[i])
        kinds = [getattr(item, "kind", None) for item in items]
        at = [i for i, kind in enumerate(kinds) if kind == records.STEP]
        steps = [items[i] for i in at]
        before = len(self._steps)
        self._steps.extend([float(s.step) if type(s.step) is int else math.nan for s in steps])
        self._peaks.extend([
            s.lr if s.skipped is False and s.lr_groups is None and type(s.lr) is float
            and -INF < s.lr < INF else applied_lr(s.lr, s.lr_groups, s.skipped)
            for s in steps])
        self._withheld.extend([s.skipped is True for s in steps])
        self._starts.extend([starts[i] for i in at])
        self._lengths.extend([len(lines[i]) for i in at])
        for i in [i for i, kind in enumerate(kinds) if kind in _RARE]:
            item, ordinal = items[i], before + bisect_left(at, i)    # step lines before it
            if item.kind == records.STATE:
                self._states.append((ordinal, _step_of(item.step), starts[i], len(lines[i])))
            elif item.kind == records.REWIND:
                self._rewinds.append((ordinal, _step_of(item.step), _step_of(item.to_step)))
            else:
                mean = to_number(item.loss_mean)
                if mean is not None and math.isfinite(mean):
                    self._epochs.append((ordinal, mean))

    def _standard(self, raw: bytes, number: int) -> Any:
        """Without msgspec: a line through the standard path, but for the writer's hardware
        and state lines (the pass needs nothing of the former and the step of the latter)."""
        if not self._first and raw.startswith(_HARDWARE_START):
            self.records += 1
            return _OTHER
        if not self._first and raw.startswith(_STATE_START):
            match = _STATE_STEP.search(raw, 0, STATE_HEAD)
            if match is not None:
                self.records += 1
                return _Found(records.STATE, **{State.STEP: int(match.group(1))})
        return self._record(raw, number)

    # -- the run as it went on -----------------------------------------------------------------
    def lineage(self, after_step: int | None = None) -> Lineage:
        """The tail of the run up to ``after_step`` (None or 0: its last step), the records a
        later one undid left out (the module docstring); its records read from the file."""
        steps, withheld, peaks = self._steps, self._withheld, self._peaks
        found = Lineage(self.path)
        bound: float | None = after_step or None        # a later step is left out
        rewinds, states = list(self._rewinds), list(self._states)
        chosen: list[tuple[int, int, int, int]] = []     # (before, order, offset, length)
        newest: int | None = None                        # the newest step line kept
        ordinal, applied, kept, states_kept, peak = len(steps), 0, 0, 0, NO_LR
        # Newest first: each step line after the rewinds and states that came after it;
        # until the rules have their steps (applied updates: withheld ones are kept too, up
        # to TAIL_FACTOR times as many lines), and any span being left out has ended.
        most = TAIL_FACTOR * self.steps_needed
        while ordinal > 0 and (bound is not None or (applied < self.steps_needed
                                                     and kept < most)):
            while rewinds and rewinds[-1][0] >= ordinal:
                _, step, to_step = rewinds.pop()
                if bound is None or step <= bound:       # not itself undone
                    found.rewinds += 1
                    if not math.isnan(to_step):
                        bound = to_step if bound is None else min(bound, to_step)
            while states and states[-1][0] >= ordinal:
                states_kept += self._state(states.pop(), bound, chosen, states_kept)
            ordinal -= 1
            if bound is not None and not steps[ordinal] <= bound:
                found.left_out += 1
                continue
            bound = None
            if newest is None:
                newest = ordinal
            applied += not withheld[ordinal]
            kept += 1
            chosen.append((ordinal, 1, self._starts[ordinal], self._lengths[ordinal]))
            peak = max(peak, peaks[ordinal])
        # the older lines: the peak's, the rewinds', and the states the rules still need
        if newest is None and ordinal > 0:
            newest = ordinal - 1
        peak = max(peak, max(peaks[:ordinal], default=NO_LR))
        found.rewinds += len(rewinds)
        while states and states_kept < self.states_needed:
            states_kept += self._state(states.pop(), None, chosen, states_kept)
        found.lr_peak = None if peak == NO_LR else max(peak, 0.0)
        if newest is not None:
            if not math.isnan(steps[newest]):
                found.last_step = int(steps[newest])
            found.epoch_mean = next((mean for before, mean in reversed(self._epochs)
                                     if before <= newest + 1), None)
        chosen.sort()
        found.records = self._read_back(chosen)
        read = [r for r in found.records if r.get(Common.KIND) == records.STEP]
        found.steps = len(read)
        if read and read[-1].get(Step.STEP) == found.last_step:
            found.loss_smooth = to_number(read[-1].get(Step.LOSS_SMOOTH))
        return found

    def _state(self, line: tuple[int, float, int, int], bound: float | None,
               chosen: list[tuple[int, int, int, int]], kept: int) -> bool:
        """A state line, newest first (``kept`` so far): kept unless undone, until the rules
        have theirs; whether it was."""
        before, step, offset, length = line
        if kept >= self.states_needed or math.isnan(step) or (bound is not None
                                                              and step > bound):
            return False
        chosen.append((before, 0, offset, length))
        return True

    def _read_back(self, places: list[tuple[int, int, int, int]]) -> list[Record]:
        """The records at ``places`` (``(_, _, offset, length)``), read again from the file;
        a line that no longer reads as a record is left out."""
        found = []
        try:
            with open(self.path, "rb") as handle:
                for _, _, offset, length in places:
                    record = self._decode(os.pread(handle.fileno(), length, offset))
                    if record is not None:
                        found.append(record)
        except OSError:           # the log went away since the pass: no records to replay
            return []
        return found

    def _decode(self, raw: bytes) -> Record | None:
        """A line as ``records.decode`` reads it; None for a line the reader skips."""
        try:
            record = (self.fast.decode_record(raw) if self.fast is not None
                      else fast.standard_record(raw))
        except (UnicodeDecodeError, ValueError, RecursionError):
            return None
        if records.problems(record) or record.get(Common.KIND) not in (records.STEP,
                                                                        records.STATE):
            return None
        return record


def applied_lr(lr: Any, groups: Any, skipped: Any) -> float:
    """The highest LR of a step line whose update was applied, as ``LrAnomalyDetector`` raises
    its peak (every group's LR when there are groups, each finite); ``NO_LR`` otherwise."""
    if skipped is not False:
        return NO_LR
    numbers = [to_number(value) for value in (groups if isinstance(groups, list) and groups
                                              else [lr]) if value is not None]
    values = [value for value in numbers if value is not None and math.isfinite(value)]
    if not values or len(values) < len(numbers):
        return NO_LR
    return max(values)


def _step_of(value: Any) -> float:
    return float(value) if type(value) is int else math.nan


# What the pass reads of each kind (every other kind: nothing)
_NAMES = {records.STEP: (Step.STEP, Step.LR, Step.LR_GROUPS, Step.SKIPPED),
          records.STATE: (State.STEP,), records.REWIND: (Rewind.STEP, Rewind.TO_STEP),
          records.EPOCH: (Epoch.LOSS_MEAN,)}
_RARE = frozenset((records.STATE, records.REWIND, records.EPOCH))


class _Found:
    """A record the standard path read, as the few fields the pass reads."""

    def __init__(self, kind: str, **values: Any):
        self.kind = kind
        self.step = self.lr = self.lr_groups = self.skipped = None
        self.to_step = self.loss_mean = None
        self.__dict__.update(values)


_OTHER = _Found("")


def _from_record(fields: _Fields | None, record: Record) -> Any:
    """A record the standard path read, as the pass reads a Struct of its kind."""
    kind = record.get(Common.KIND)
    names = _NAMES.get(kind) if isinstance(kind, str) else None
    if names is None or not isinstance(kind, str):
        return _OTHER
    values = {name: record.get(name) for name in names}
    if fields is not None:
        return fields.types[kind](**values)
    return _Found(kind, **values)


class _Fields:
    """msgspec's decoding of lines into the few fields the pass reads, by kind; each Struct
    type has its kind as the class attribute ``kind``."""

    def __init__(self) -> None:
        import msgspec

        self.types: dict[str, Any] = {}
        for kind in records.KINDS:
            struct = msgspec.defstruct(
                f"{kind.title()}Fields", [(n, Any, None) for n in _NAMES.get(kind, ())],
                tag_field=Common.KIND, tag=kind, gc=False)
            setattr(struct, "kind", kind)      # noqa: B010  (a class attribute: mypy)
            self.types[kind] = struct
        self._decoder = msgspec.json.Decoder(reduce(or_, self.types.values()))
        self._errors = (msgspec.DecodeError, RecursionError)

    def decode_all(self, lines: list[bytes]) -> list[Any]:
        """Each line's Struct; None where the standard path must read it (another kind, a
        torn or foreign line, one over the cap)."""
        if max(map(len, lines), default=0) <= MAX_LINE_BYTES:
            try:
                return list(map(self._decoder.decode, lines))      # one C loop: the usual
            except self._errors:
                pass
        return [self._one(raw) for raw in lines]

    def _one(self, raw: bytes) -> Any:
        if not raw or len(raw) > MAX_LINE_BYTES:
            return None
        try:
            return self._decoder.decode(raw)
        except self._errors:
            return None
