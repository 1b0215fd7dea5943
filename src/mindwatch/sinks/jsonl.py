"""The run log: one strict-JSON line per record, on disk as soon as it is written."""
from __future__ import annotations

import os
from typing import Any, Mapping, Optional, TextIO

from .. import records
from .base import Sink


class JsonlSink(Sink):
    """Appends to ``path``. Line buffering hands each complete line to the OS at once, so a
    process killed with SIGKILL leaves every finished line behind; no fsync per line (it
    would cost milliseconds per step on network file systems), so a power cut may lose the
    last few lines."""

    def __init__(self, path: str):
        self.path = path
        self._file: Optional[TextIO] = open(path, "a", buffering=1, encoding="utf-8")

    def write(self, record: Mapping[str, Any]) -> None:
        if self._file is None:
            raise RuntimeError(f"run log {self.path} is already closed")
        self._file.write(records.encode(record) + "\n")

    def close(self) -> None:
        if self._file is not None:
            self._file.flush()
            os.fsync(self._file.fileno())
            self._file.close()
            self._file = None
