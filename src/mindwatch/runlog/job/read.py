"""Reading ``job.jsonl`` fast (``view.read_job``): its ``job_step`` lines into columns,
the rare kinds (``run``, ``event``, ``hang``, ``job_ranks``, ``end``) whole.

A 4096-rank job of 200,000 steps writes ~100 MB: 200k ``job_step`` lines of ~450 bytes
(the 90% that matters for speed) and ~300 ``job_ranks`` lines of ~130 KB. With msgspec, a
chunk's lines are decoded by ``map`` into Structs of the ``job_step`` fields, the other kinds
into empty Structs that msgspec skips through without building anything (a ``job_ranks``
line is then decoded again only when the bins are wanted); the columns come out of the
Structs with ``attrgetter`` in C. A chunk msgspec cannot take whole (a torn or foreign line,
an unknown kind, a blank line) is read line by line through the rank logs' rules
(``lines.LineDecoder``: skipped and counted; more bad lines than records, or a first record
that is not a ``run``, is not a job log). Without msgspec every line goes through the
standard ``json`` module: the same results, some times slower.
"""
from __future__ import annotations

import os
import stat
from dataclasses import dataclass, field
from typing import Any

from ... import records
from ...job_schema import (
    EVENT,
    HANG,
    JOB_RANKS,
    JOB_SCHEMAS,
    JOB_STEP,
    JobEnd,
    JobRanks,
    JobRun,
    JobStep,
    Spread,
)
from ...records import Common
from .. import fast
from ..lines import MAX_LINE_BYTES, LineDecoder, Record, RunLogError
from .columns import SEGMENT, SPREADS, bin_arrays, step_columns

CHUNK_BYTES = 16 * 2**20
_BINS_PREFIX = b'{"kind":"job_ranks",'
# What each kind must carry beyond kind, rank and time; the job's end has no elapsed_s.
_REQUIRED = {**{kind: frozenset(Common.REQUIRED + cls.REQUIRED)
                for kind, cls in JOB_SCHEMAS.items()},
             records.RUN: frozenset(Common.REQUIRED + JobRun.REQUIRED),
             records.END: frozenset(Common.REQUIRED + JobEnd.REQUIRED)}


@dataclass
class JobParts:
    """What ``job.jsonl`` held: the rare records in file order by kind, each with the
    number of its segment (1: the first ``run`` record's), and the steps as columns."""
    runs: list[Record] = field(default_factory=list)
    events: list[Record] = field(default_factory=list)
    hangs: list[Record] = field(default_factory=list)
    bins: list[Record] = field(default_factory=list)
    # without the bins: each one's data times alone (``bin_arrays``' form), when msgspec
    # read them; else empty
    data_times: list[Record] = field(default_factory=list)
    ends: list[Record] = field(default_factory=list)
    ended: bool = False                  # the latest segment has its end record
    columns: dict[str, Any] = field(default_factory=dict)     # name -> float64 array
    segment_starts: list[int] = field(default_factory=list)   # first step index of each
    skipped: int = 0
    skipped_at: list[int] = field(default_factory=list)
    torn_tail: bool = False
    size: int = 0


class _Parser:
    """The msgspec Structs of a job log's lines (one per process)."""

    def __init__(self) -> None:
        import msgspec

        self.errors = (msgspec.DecodeError, RecursionError)
        spread = msgspec.defstruct(
            "SpreadLine", [(name, Any) for name in Spread.REQUIRED]
            + [(name, Any, None) for name in Spread.OPTIONAL], gc=False)
        self.empty = spread(**dict.fromkeys(Spread.REQUIRED))
        fields: list[tuple[str, Any]] = [(name, Any) for name in Common.REQUIRED
                                         if name != Common.KIND]
        fields += [(name, spread | None if name in SPREADS else Any)
                   for name in JobStep.REQUIRED]
        self.StepLine = msgspec.defstruct("JobStepLine", fields, tag_field=Common.KIND,
                                          tag=JOB_STEP, gc=False)
        rare = {kind: msgspec.defstruct(f"Rare{index}Line", [], tag_field=Common.KIND,
                                        tag=kind)
                for index, kind in enumerate((records.RUN, records.END, records.NOTICE,
                                              *JOB_SCHEMAS)) if kind != JOB_STEP}
        self.bins_line = rare[JOB_RANKS]
        # a bin's data times alone (the summary's: each rank's in all), the rest skipped
        self.data_times = msgspec.json.Decoder(msgspec.defstruct(
            "JobDataTimesLine", [(JobRanks.STEP_FROM, Any), (JobRanks.STEP, Any),
                                 (JobRanks.DATA_TIME_S, Any, None)],
            tag_field=Common.KIND, tag=JOB_RANKS, gc=False))
        self.block = msgspec.json.Decoder(self.StepLine | _union(list(rare.values())))
        self.typed = msgspec.json.Decoder(self.StepLine)


def _union(types: list[Any]) -> Any:
    union = types[0]
    for kind in types[1:]:
        union = union | kind
    return union


_parser: _Parser | None = None


def _fast() -> _Parser | None:
    global _parser
    if fast.parser() is None:              # no msgspec, or MINDWATCH_JSON=json
        return None
    if _parser is None:
        _parser = _Parser()
    return _parser


class JobDecoder(LineDecoder):
    """``LineDecoder`` with the job log's kinds: ``job_step`` lines (Structs or dicts) into
    ``steps``, every other record whole, in order, with the count of steps before it."""

    def __init__(self, path: str, *, bins: bool, at_start: bool = True):
        super().__init__(path, at_start=at_start)
        self.bins = bins
        self.parser = _fast()
        self.steps: list[Any] = []
        self.others: list[tuple[int, Record]] = []
        self.data_times: list[Record] = []    # bins not wanted: their data times alone

    def feed_lines(self, data: bytes) -> None:
        lines = self._complete(data)
        start = 0
        while start < len(lines) and self._first:
            self._one(lines[start])               # the first record decides: a job log?
            start += 1
        rest = lines[start:]
        if self.parser is None or not self._block(rest, self.parser):
            for raw in rest:
                self._typed(raw)

    def finish(self) -> bool:
        """The last line without its newline; whether it was torn."""
        record, torn = self.tail()
        if record is not None:
            self._add(record)
        return torn

    def _one(self, raw: bytes | None) -> None:
        if not self.bins and raw is not None and raw.startswith(_BINS_PREFIX) \
                and raw.rstrip().endswith(b"}"):
            self.line += 1                    # a bin, not wanted: counted, not decoded
            self.records += 1
            return
        self.line += 1
        record = self._record(raw, self.line)
        if record is not None:
            self._add(record)

    def _add(self, record: Record) -> None:
        if record.get(Common.KIND) == JOB_STEP:
            self.steps.append(record)
        else:
            self.others.append((len(self.steps), record))

    def _typed(self, raw: bytes | None) -> None:
        parser = self.parser
        if parser is None or raw is None or len(raw) > MAX_LINE_BYTES or not raw.isascii() \
                or fast.might_nest_deeply(raw):
            self._one(raw)
            return
        try:
            item = parser.typed.decode(raw)
        except parser.errors:                 # another kind, or a line the standard path judges
            self._one(raw)
            return
        self.line += 1
        self.records += 1
        self.steps.append(item)

    def _block(self, lines: list[bytes | None], parser: _Parser) -> bool:
        """Decodes ``lines`` without a Python step per line; False, nothing done, when
        msgspec cannot take them all (then the caller reads them line by line)."""
        if not lines or None in lines:
            return False
        found: list[bytes] = lines            # type: ignore[assignment]
        if max(map(len, found)) > MAX_LINE_BYTES or not all(map(bytes.isascii, found)):
            return False
        try:
            items = list(map(parser.block.decode, found))
        except parser.errors:
            return False
        step_line = parser.StepLine
        first, done = self.line + 1, 0
        others = [i for i, item in enumerate(items) if type(item) is not step_line]
        self.records += len(items) - len(others)
        for index in others:
            self.steps += items[done:index]
            done = index + 1
            if not self.bins and type(items[index]) is parser.bins_line:
                self.records += 1             # checked by msgspec; not wanted whole
                try:
                    part: Any = parser.data_times.decode(found[index])
                except parser.errors:
                    continue
                self.data_times.append({JobRanks.STEP_FROM: part.step_from,
                                        JobRanks.STEP: part.step,
                                        JobRanks.DATA_TIME_S: part.data_time_s})
                continue
            record = self._record(found[index], first + index)
            if record is not None:
                self.others.append((len(self.steps), record))
        self.steps += items[done:]
        self.line += len(found)
        return True

    def problem(self, record: Record) -> str | None:
        return _problem(record)


def _problem(record: Record) -> str | None:
    """Why ``record`` is not a job-log record, or None; a kind this version does not know is
    kept (and ignored), as in a rank log."""
    kind = record.get(Common.KIND)
    needed = _REQUIRED.get(kind) if isinstance(kind, str) else None
    if needed is None:
        needed = frozenset(Common.REQUIRED)
    missing = sorted(needed - record.keys())
    return f"{kind or 'record'} lacks {', '.join(missing)}" if missing else None


def read_parts(path: str, *, bins: bool = True) -> JobParts | None:
    """The parts of the job log at ``path``; None when it holds no record (empty, or only a
    torn first line: rank 0 died before its first record). Raises RunLogError when it is
    not a job log. ``bins``: decode the ``job_ranks`` lines (else checked and left out)."""
    import numpy as np

    decoder = JobDecoder(path, bins=bins)
    parts = JobParts()
    chunks: dict[str, list[Any]] = {}
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):
            raise RunLogError(f"{path}: not a regular file; not a job log")
        with open(path, "rb") as handle:
            while chunk := handle.read(CHUNK_BYTES):
                parts.size += len(chunk)
                decoder.feed_lines(chunk)
                _collect(decoder, parts, chunks)
    except OSError as exc:
        raise RunLogError(f"cannot read {path}: {exc.strerror or exc}") from exc
    parts.torn_tail = decoder.finish()
    _collect(decoder, parts, chunks)
    if not decoder.records and decoder.skipped <= int(parts.torn_tail):
        return None          # no complete line: rank 0 died before its first record
    decoder.check(final=True)
    parts.skipped, parts.skipped_at = decoder.skipped, list(decoder.skipped_at)
    parts.columns = {name: np.concatenate(found) if found else np.zeros(0)
                     for name, found in chunks.items()}
    return parts


def _collect(decoder: JobDecoder, parts: JobParts, chunks: dict[str, list[Any]]) -> None:
    """The decoder's steps so far into columns (the Structs freed), its other records into
    ``parts`` in order."""
    before = sum(len(c) for c in chunks.get(JobStep.STEP, ()))
    for at, record in decoder.others:
        kind = record.get(Common.KIND)
        segment = max(1, len(parts.runs))
        if kind == records.RUN:
            parts.runs.append(record)
            parts.segment_starts.append(before + at)
            parts.ended = False
        elif kind == records.END:
            parts.ends.append({**record, SEGMENT: segment})
            parts.ended = True
        elif kind in JOB_SCHEMAS and kind != JOB_STEP:
            target = {EVENT: parts.events, HANG: parts.hangs}.get(kind)
            if target is not None:
                target.append({**record, SEGMENT: segment})
            else:
                parts.bins.append(bin_arrays(record))
    decoder.others = []
    parts.data_times += [bin_arrays(part) for part in decoder.data_times]
    decoder.data_times = []
    empty = decoder.parser.empty if decoder.parser is not None else None
    for name, column in step_columns(decoder.steps, empty).items():
        chunks.setdefault(name, []).append(column)
    decoder.steps = []
