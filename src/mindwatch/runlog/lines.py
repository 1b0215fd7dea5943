"""Bytes of a run log -> records, for the reader (a whole file) and the live view (a file
that grows between reads).

Only a line that has its newline is complete. An incomplete last line is being written now,
or was cut by a crash: it stays ``pending`` until more bytes come, and a reader that wants it
anyway asks ``tail()``, which says whether it was torn. A bad complete line means the file is
not a run log and is an error, since guessing would hide real damage.
"""
from __future__ import annotations

from typing import Any

from .. import records

Record = dict[str, Any]


class RunLogError(ValueError):
    """The input is not a readable run log; the message says which file and why."""


class LineDecoder:
    def __init__(self, path: str):
        self.path = path
        self.pending = b""          # bytes of a line whose newline has not come yet
        self.line = 0               # complete lines read, for error messages
        self._first = True          # no record read yet: the next must be a `run` record

    def feed(self, data: bytes) -> list[Record]:
        """The records of the lines that ``data`` completes; raises RunLogError on a bad one."""
        lines = (self.pending + data).split(b"\n")
        self.pending = lines.pop()          # b"" when the data ended with a newline
        found = []
        for raw in lines:
            self.line += 1
            if not raw.strip():
                continue
            try:
                record = records.decode(raw.decode("utf-8"))
            except (UnicodeDecodeError, ValueError) as exc:
                raise RunLogError(f"{self.path}, line {self.line}: not a run-log record "
                                  f"({exc})") from exc
            found.append(self._checked(record))
        return found

    def tail(self) -> tuple[Record | None, bool]:
        """The pending line as a record if it reads as one, and whether it was torn."""
        if not self.pending.strip():
            return None, False
        try:
            record = records.decode(self.pending.decode("utf-8"))
        except (UnicodeDecodeError, ValueError):
            return None, True
        return self._checked(record), False

    def _checked(self, record: Record) -> Record:
        if self._first and record.get(records.Common.KIND) != records.RUN:
            raise RunLogError(f"{self.path}: the first record is not a 'run' record; not a "
                              "mindwatch log")
        self._first = False
        return record
