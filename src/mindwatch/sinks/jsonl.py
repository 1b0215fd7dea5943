"""The run log: one strict-JSON line per record, on disk as soon as it is written.

Written with one ``os.write`` per record on a descriptor opened with ``O_APPEND``, so each
line reaches the OS whole or, on a full disk, as a torn prefix; nothing waits in a Python
buffer. A process killed with SIGKILL leaves every finished line behind. No fsync per line
(it would cost milliseconds per step on network file systems): a power cut may lose the last
few lines.

Faults never glue two records into one line: after a torn write (or when appending to a log
whose last line a crash tore) the next record starts with a newline, so at most the torn line
is lost. A log file that vanished (its directory removed mid-run) is noticed within
``RECHECK_S`` and created anew, starting with the segment's ``run`` record again so that it
reads as a run log. Errors propagate to the caller (the monitor's ``SinkSet`` says them once
and keeps trying).
"""
from __future__ import annotations

import os
import time
from collections.abc import Mapping
from typing import Any

from .. import records
from ..records import Common
from .base import Sink
from .line import encode_line

RECHECK_S = 1.0          # seconds between checks that the log file is still linked


def _ends_torn(path: str) -> bool:
    """True when ``path`` is non-empty and its last byte is not a newline."""
    try:
        with open(path, "rb") as handle:
            handle.seek(0, os.SEEK_END)
            if handle.tell() == 0:
                return False
            handle.seek(-1, os.SEEK_END)
            return handle.read(1) != b"\n"
    except OSError:
        return False


class JsonlSink(Sink):
    def __init__(self, path: str):
        self.path = path
        self._fd: int | None = None
        self._torn = False            # the file's last line is incomplete
        self._run_record: bytes | None = None
        self._checked = 0.0
        self._open()

    @property
    def name(self) -> str:
        return f"run log {self.path}"

    def _open(self) -> None:
        os.makedirs(os.path.dirname(self.path) or ".", exist_ok=True)
        self._torn = _ends_torn(self.path)
        # 0o666 and the user's umask decide the mode, as for any file the user's job writes.
        self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666)
        self._checked = time.monotonic()

    def _vanished(self) -> bool:
        """The file was unlinked (its directory removed): writes would go nowhere."""
        now = time.monotonic()
        if now - self._checked < RECHECK_S:
            return False
        self._checked = now
        assert self._fd is not None
        return os.fstat(self._fd).st_nlink == 0

    def write(self, record: Mapping[str, Any]) -> None:
        if self._fd is None:
            raise RuntimeError(f"run log {self.path} is already closed")
        line = encode_line(record)
        if record.get(Common.KIND) == records.RUN:
            self._run_record = line
        if self._vanished():
            os.close(self._fd)
            self._fd = None
            self._open()              # raises while the directory cannot be made again
            if self._run_record is not None and self._run_record is not line:
                self._write(self._run_record)
        self._write(line)

    def _write(self, line: bytes) -> None:
        assert self._fd is not None
        data = b"\n" + line if self._torn else line
        total = len(data)
        while data:
            try:
                written = os.write(self._fd, data)
            except OSError:
                if len(data) < total:     # part of it reached the file, which now ends mid-line
                    self._torn = True
                raise
            data = data[written:]
        self._torn = False

    def close(self) -> None:
        if self._fd is not None:
            fd, self._fd = self._fd, None
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
