"""A sink whose records are delivered by a thread of its own (the alert webhook, the
experiment trackers): the training thread only puts a record on a bounded queue and never
waits for a service that is down, slow or refusing; what a full queue drops is counted and
said once; a failure is said once and later records are still tried; ``drain`` waits a
bounded time at the end of the run, then gives up what is left, and says so."""
from __future__ import annotations

import queue
import threading
import time
from collections.abc import Mapping
from typing import Any

from ..basics.once import OnceMessages
from .base import Sink

_FAILED, _DROPPED = "failed", "dropped"     # OnceMessages keys


class QueuedSink(Sink):
    """Subclasses implement ``deliver(record)`` (on the sink's thread) and may implement
    ``finish()`` (on the same thread, once, after the last record); ``write`` puts each
    record (a subclass that picks or reshapes them calls ``put``). ``UNIT`` and ``UNITS``
    name what is delivered in the messages ("an alert", "alerts")."""

    UNIT, UNITS = "a record", "records"

    def __init__(self, *, queue_size: int, drain_s: float, thread_name: str):
        self.sent = self.failed = self.dropped = 0
        self._queue: queue.Queue = queue.Queue(queue_size)
        self._pending = 0                           # queued or being delivered
        self._done = threading.Condition()
        self._thread: threading.Thread | None = None
        self._thread_name = thread_name
        self._messages = OnceMessages()
        self._drain_s = drain_s
        self._deadline: float | None = None         # of the wait at the end, once set
        self._ended = False                         # finish queued: nothing after it

    def deliver(self, record: Mapping[str, Any]) -> None:
        raise NotImplementedError

    def finish(self) -> None:
        """After the last record, on the sink's thread (the run's end)."""

    def drain_note(self) -> str:
        """More words for the message of what the end gave up (a timeout of each call)."""
        return ""

    def write(self, record: Mapping[str, Any]) -> None:
        self.put(dict(record))

    def put(self, item: Any) -> None:
        """Queue ``item`` for ``deliver`` (None: the end, for ``finish``); a full queue
        drops it, counted and said once. Nothing is queued after the end (``drain``): what
        the run says then (a notice of the drain's) has no thread left to take it."""
        with self._done:
            if self._ended:
                return
            try:
                self._queue.put_nowait(item)
            except queue.Full:
                if item is not None:
                    self.dropped += 1
                    self._messages.report(
                        _DROPPED, f"{self.name} is behind ({self._queue.maxsize} {self.UNITS} "
                                  f"waiting): further {self.UNITS} are dropped until it "
                                  "catches up")
                return
            self._pending += 1
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name=self._thread_name,
                                            daemon=True)
            self._thread.start()

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            try:
                if item is None:
                    self.finish()
                else:
                    self.deliver(item)
                    self.sent += 1
            except Exception as exc:                # never let the thread die on one item
                self.failed += 1
                self._messages.report(_FAILED, f"{self.name} did not take {self.UNIT} "
                                               f"({type(exc).__name__}: {exc}); training goes "
                                               f"on, later {self.UNITS} are still tried (said "
                                               "once)")
            with self._done:
                self._pending -= 1
                self._done.notify_all()
            if item is None:
                return

    def pop_messages(self) -> list[str]:
        return self._messages.pop()

    @property
    def pending(self) -> int:
        """Records queued or being delivered."""
        return self._pending

    def drain(self) -> None:
        """The end of the run: ``finish`` queued after what waits, all of it waited for up to
        ``drain_s``; what still waits then is given up, and said. Before the sinks close, so
        that what ``finish`` says (a tracker's run that could not be ended) reaches the run
        log while it is open. Nothing to finish when nothing was ever queued."""
        if self._thread is None:
            return
        if self._deadline is None:                  # close() after drain() waits no longer
            self._deadline = time.monotonic() + self._drain_s
            self.put(None)
            self._ended = True
        deadline = self._deadline
        with self._done:
            while self._pending and (left := deadline - time.monotonic()) > 0:
                self._done.wait(left)
            waiting = self._pending
        if waiting:
            unit = self.UNIT.split(" ", 1)[1] if waiting == 1 else self.UNITS
            self._messages.report(_FAILED, f"{self.name} did not take {waiting} {unit} within "
                                           f"{self._drain_s:g} s of the end of the run"
                                           f"{self.drain_note()}; they are given up")

    def close(self) -> None:
        """``drain``, when it did not run first; a thread stuck in a call is a daemon and ends
        with the process (a full queue: it is stuck, and ``finish`` is given up)."""
        self.drain()
