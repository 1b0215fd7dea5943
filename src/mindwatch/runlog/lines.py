"""Bytes of a run log -> records, for the reader (a whole file) and the live view (a file
that grows between reads).

Only a line that has its newline is complete. An incomplete last line is being written now,
or was cut by a crash: it stays ``pending`` until more bytes come, and a reader that wants it
anyway asks ``tail()``, which says whether it was torn.

A bad line is skipped and counted, not fatal: the writer starts the next record on a new line
after a torn write (full disk) and when it appends to a log a crash tore, so a torn fragment
may sit on a line of its own anywhere in the file. What still makes the file unreadable
(``RunLogError``) is evidence that it is not a run log at all: its first JSON object is not a
complete ``run`` record, or more of its lines are bad than good (``check``). The rules are
documented in docs/log-format.md, "Reading a run log".
"""
from __future__ import annotations

from typing import Any

from .. import records
from ..records import Common
from . import fast

Record = dict[str, Any]

# Longer lines are skipped, so a reader's memory stays bounded by this whatever the file
# holds. Real records are far smaller: a step record with the per-layer gradient norms of a
# model with 10,000 parameter groups is under 1 MiB.
MAX_LINE_BYTES = 8 * 2**20
SHOWN_SKIPS = 5          # line numbers of skipped lines kept for messages


class RunLogError(ValueError):
    """The input is not a readable run log; the message says which file and why."""


# Every field a record of each kind must carry: the usual case, checked with one C-level
# set comparison per record. Hardware records also need each device's fields: problems().
_REQUIRED = {kind: frozenset(Common.REQUIRED + cls.REQUIRED)
             for kind, cls in records.SCHEMAS.items() if kind != records.HARDWARE}


def _problem(record: Record) -> str | None:
    """Why ``record`` cannot be used (``records.problems``), or None. A record of a kind this
    version does not know is kept: new kinds may appear within a schema version, and readers
    ignore them."""
    kind = record.get(Common.KIND)
    if isinstance(kind, str):
        required = _REQUIRED.get(kind)
        if required is not None and record.keys() >= required:
            return None
        if kind not in records.SCHEMAS and all(name in record for name in Common.REQUIRED):
            return None
    found = records.problems(record)
    return "; ".join(found) if found else None


def too_many_bad(path: str, skipped: int, good: int, first_problem: str) -> RunLogError:
    """The error for a file with more bad lines than records (``good``)."""
    return RunLogError(f"{path}: {skipped} of {skipped + good} lines are not run-log "
                       f"records (first: {first_problem}); not a mindwatch log")


class LineDecoder:
    """``at_start``: the bytes fed begin at the start of the file (the first record must then
    be a ``run`` record); False for a decoder that starts at a line inside the file (the live
    view's tail), whose line numbers then count from there."""

    def __init__(self, path: str, *, at_start: bool = True):
        self.path = path
        self.fast = fast.parser()   # None: every line through the standard json module
        self.pending = b""          # bytes of a line whose newline has not come yet
        self.line = 0               # complete lines read, for messages
        self.records = 0            # records returned
        self.skipped = 0            # lines skipped: torn, undecodable, not a record, too long
        self.skipped_at: list[int] = []   # the first SHOWN_SKIPS of their line numbers
        self.first_problem = ""     # "line N: why", for the error when too many are bad
        self.first_why = ""         # the why of first_problem, and its line number:
        self.first_problem_at = 0
        self._first = at_start      # no record read yet: the next must be a `run` record
        self._discarding = False    # inside a line longer than MAX_LINE_BYTES

    def feed(self, data: bytes) -> list[Record]:
        """The records of the lines that ``data`` completes; bad lines are skipped and
        counted. Raises RunLogError when the first record is not a ``run`` record."""
        found = []
        for raw in self._complete(data):
            self.line += 1
            record = self._record(raw, self.line)
            if record is not None:
                found.append(record)
        return found

    def _complete(self, data: bytes) -> list[bytes | None]:
        """The lines ``data`` completes (None for one over the cap), and the rest kept
        pending; counts a line over the cap that ``data`` ends."""
        if self._discarding:
            cut = data.find(b"\n")
            if cut < 0:
                return []
            data = data[cut + 1:]
            self._discarding = False
            self.line += 1
            self._skip(self.line, f"longer than {MAX_LINE_BYTES} bytes")
        lines: list[bytes | None] = list(data.split(b"\n"))
        last = lines.pop() or b""           # b"" when the data ended with a newline
        # The pending bytes join the first line only when the two fit under the cap (None
        # marks a line that does not), so memory holds at most one line of MAX_LINE_BYTES
        # beyond the data fed.
        if lines and self.pending:
            first = lines[0] or b""
            fits = len(self.pending) + len(first) <= MAX_LINE_BYTES
            lines[0] = self.pending + first if fits else None
            self.pending = b""
        if len(self.pending) + len(last) > MAX_LINE_BYTES:
            self.pending, self._discarding = b"", True
        else:
            self.pending += last
        return lines

    def tail(self) -> tuple[Record | None, bool]:
        """The pending line as a record if it reads as one, and whether it was torn (then it
        is counted as skipped). Consumes the pending line."""
        number = self.line + 1
        if self._discarding:
            self._discarding = False
            self._skip(number, f"longer than {MAX_LINE_BYTES} bytes")
            return None, True
        raw, self.pending = self.pending, b""
        if not raw or raw.isspace():
            return None, False
        before = self.skipped
        record = self._record(raw, number)
        return record, self.skipped > before

    def check(self, *, final: bool) -> None:
        """Raise RunLogError when the lines read so far say this is not a run log: more lines
        skipped than records read, or (``final``: the whole file was read) no record at all.
        """
        if self.skipped > self.records:
            raise too_many_bad(self.path, self.skipped, self.records, self.first_problem)
        if final and not self.records:
            raise RunLogError(f"{self.path}: no run-log record (an empty file); not a "
                              "mindwatch log, or a run killed before its first record")

    def _record(self, raw: bytes | None, number: int) -> Record | None:
        if raw is not None and (not raw or raw.isspace()):      # no copy, unlike strip()
            return None
        if raw is None or len(raw) > MAX_LINE_BYTES:
            self._skip(number, f"longer than {MAX_LINE_BYTES} bytes")
            return None
        try:
            record = (self.fast.decode_record(raw) if self.fast is not None
                      else fast.standard_record(raw))
        except (UnicodeDecodeError, ValueError, RecursionError) as exc:
            self._skip(number, f"not a strict JSON object ({exc})")
            return None
        problem = self.problem(record)
        if self._first:
            self._check_first(record, problem, number)
        if problem is not None:
            self._skip(number, problem)
            return None
        self.records += 1
        return record

    def problem(self, record: Record) -> str | None:
        """Why ``record`` is not a record of this kind of log, or None (a reader of another
        log of the same line rules, the job log, names its own kinds)."""
        return _problem(record)

    def _check_first(self, record: Record, problem: str | None, number: int) -> None:
        """The first JSON object decides whether this is a run log at all."""
        if record.get(Common.KIND) != records.RUN:
            raise RunLogError(f"{self.path}, line {number}: the first record is not a 'run' "
                              "record; not a mindwatch log")
        if problem is not None:
            raise RunLogError(f"{self.path}, line {number}: the first record is not a "
                              f"complete 'run' record ({problem}); not a mindwatch log")
        self._first = False

    def _skip(self, number: int, why: str) -> None:
        self.skipped += 1
        if len(self.skipped_at) < SHOWN_SKIPS:
            self.skipped_at.append(number)
        if not self.first_problem:
            self.first_problem = f"line {number}: {why}"
            self.first_why, self.first_problem_at = why, number
