"""The monitor's one way out: a record is stamped (kind, rank, time) and handed to every sink.

Sits between the monitor and its ``SinkSet``: the sampler thread and the training thread
both write, so one lock orders whole records; a sink problem (said once by the ``SinkSet``)
becomes a ``notice`` record for the sinks that work, the console among them, and goes to
stderr when the console itself is what fails.
"""
from __future__ import annotations

import sys
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from .. import records
from ..basics.clock import Clock
from ..records import Common, Notice
from ..sinks.base import Sink
from ..sinks.sink_set import SinkError, SinkSet

SINK_SOURCE = "sink"           # Notice.SOURCE of messages about sinks


class RecordWriter:
    def __init__(self, *, rank: int, clock: Clock, console: Sink,
                 open_sinks: Callable[[], list[Sink]], on_error: str):
        self.rank, self.clock, self.console = rank, clock, console
        self._open_sinks, self._on_error = open_sinks, on_error
        self._said: list[tuple[Sink, str]] = []
        self._lock = threading.RLock()
        self._closed = False
        self._set = self._new_set()

    def _new_set(self) -> SinkSet:
        return SinkSet(self._open_sinks(), on_error=self._on_error,
                       say=lambda sink, message: self._said.append((sink, message)))

    @property
    def lock(self) -> threading.RLock:
        """Held while a record is written; the sampler thread takes it to keep its record and
        its findings together."""
        return self._lock

    @property
    def sinks(self) -> list[Sink]:
        return self._set.sinks

    @property
    def error(self) -> SinkError | None:
        """The first sink failure under ``on_sink_error="raise"``."""
        return self._set.error

    def reopen(self) -> None:
        """Open every sink again, for a new run segment."""
        with self._lock:
            self._set, self._closed = self._new_set(), False

    def emit(self, kind: str, fields: Mapping[str, Any], time: float | None = None) -> None:
        record = self._stamped(kind, fields, time)
        with self._lock:
            self._set.write(record)
            self._say()

    def emit_many(self, kind: str, each: Sequence[Mapping[str, Any]]) -> None:
        """Records of ``kind`` written together, under one hold of the lock, so no other
        thread's record comes between them and a sink that shows them as one (the
        console's event line, ``Sink.write_many``) has them all at once."""
        if not each:
            return
        found = [self._stamped(kind, fields, None) for fields in each]
        with self._lock:
            self._set.write_many(found)
            self._say()

    def _stamped(self, kind: str, fields: Mapping[str, Any], time: float | None
                 ) -> dict[str, Any]:
        return {Common.KIND: kind, Common.RANK: self.rank,
                Common.TIME: self.clock.time() if time is None else time, **fields}

    def close(self) -> None:
        with self._lock:
            self._set.drain()                 # what it says still reaches the open log
            self._say()
            self._set.close()
            self._closed = True
            self._say()                   # a close that failed: on stderr only

    def _say(self) -> None:
        while self._said:
            sink, message = self._said.pop(0)
            if self._closed or sink is self.console or self._set.failing(self.console):
                print(f"mindwatch [rank {self.rank}]: {message}", file=sys.stderr, flush=True)
            if not self._closed:
                self._set.write({Common.KIND: records.NOTICE, Common.RANK: self.rank,
                                 Common.TIME: self.clock.time(), Notice.MESSAGE: message,
                                 Notice.SOURCE: SINK_SOURCE})
