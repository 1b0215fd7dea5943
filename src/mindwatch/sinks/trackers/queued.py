"""A sink whose records are delivered by a thread of its own: the training thread only puts a
record on a bounded queue (never waits for a tracker that is down, slow or refusing); what a
full queue drops is counted and said once; a failure is said once and later records are still
tried; ``drain`` waits a bounded time at the end of the run."""
from __future__ import annotations

import contextlib
import queue
import threading
import time
from collections.abc import Mapping
from typing import Any

from ...basics.once import OnceMessages
from ..base import Sink

QUEUE_SIZE = 10_000      # records waiting (~an hour of steps at 3 steps/s)
DRAIN_S = 10.0           # the longest a closing run waits for its tracker
_FAILED, _DROPPED = "failed", "dropped"


class QueuedSink(Sink):
    """Subclasses implement ``deliver(record)`` (on the sink's thread) and may implement
    ``finish()`` (on the same thread, once, after the last record)."""

    def __init__(self, *, queue_size: int = QUEUE_SIZE, drain_s: float = DRAIN_S):
        self.delivered = self.failed = self.dropped = 0
        self._queue: queue.Queue = queue.Queue(queue_size)
        self._pending = 0
        self._done = threading.Condition()
        self._thread: threading.Thread | None = None
        self._messages = OnceMessages()
        self._drain_s = drain_s
        self._deadline: float | None = None

    def deliver(self, record: Mapping[str, Any]) -> None:
        raise NotImplementedError

    def finish(self) -> None:
        """After the last record, on the sink's thread (the run's end)."""

    def write(self, record: Mapping[str, Any]) -> None:
        with self._done:
            try:
                self._queue.put_nowait(dict(record))
            except queue.Full:
                self.dropped += 1
                self._messages.report(_DROPPED, f"{self.name} is behind ({self._queue.maxsize} "
                                                "records waiting): records are dropped until it "
                                                "catches up (said once)")
                return
            self._pending += 1
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, daemon=True,
                                            name=f"mindwatch-{type(self).__name__}")
            self._thread.start()

    def _run(self) -> None:
        while True:
            record = self._queue.get()
            last = record is None
            try:
                if last:
                    self.finish()
                else:
                    self.deliver(record)
                    self.delivered += 1
            except Exception as exc:        # never let the thread die on one record
                self.failed += 1
                self._messages.report(_FAILED, f"{self.name} did not take a record "
                                               f"({type(exc).__name__}: {exc}); training goes "
                                               "on, later records are still tried (said once)")
            with self._done:
                self._pending -= 1
                self._done.notify_all()
            if last:
                return

    def pop_messages(self) -> list[str]:
        return self._messages.pop()

    def drain(self) -> None:
        """Wait up to ``drain_s`` for every queued record; what still waits then is given
        up, and said."""
        if self._deadline is None:
            self._deadline = time.monotonic() + self._drain_s
        with self._done:
            while self._pending and (left := self._deadline - time.monotonic()) > 0:
                self._done.wait(left)
            waiting = self._pending
        if waiting and self._thread is not None:
            self._messages.report(_FAILED, f"{self.name} did not take {waiting} record(s) "
                                           f"within {self._drain_s:g} s of the run's end; they "
                                           "are given up")

    def close(self) -> None:
        """The end: ``finish`` on the sink's thread, waited for up to ``drain_s``."""
        with self._done:
            self._pending += 1
        with contextlib.suppress(queue.Full):
            self._queue.put_nowait(None)
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, daemon=True,
                                            name=f"mindwatch-{type(self).__name__}")
            self._thread.start()
        self.drain()
