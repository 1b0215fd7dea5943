"""Every sink of a monitor, written together; a sink that fails never takes training down.

A monitor runs inside someone's week-long job, so a full disk, a removed run directory or a
lost permission must not end it. ``write`` hands each record to every sink; a sink that
raises is said once per outage (one line naming the sink, where it writes and the error),
asked again with the next record, and said again once it works ("writes again after N lost
records"). The other sinks never notice. Under ``on_error="raise"`` the first failure is
kept in ``error`` for the training thread to act on (the sampler thread writes records too,
and must not be the one that stops training).
"""
from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from operator import methodcaller
from typing import Any

from .base import Sink


class SinkError(RuntimeError):
    """A sink could not write under ``on_sink_error="raise"``; the message names the sink."""


class SinkSet:
    def __init__(self, sinks: Iterable[Sink], *, on_error: str = "warn",
                 say: Callable[[Sink, str], None]):
        """``say(failed_sink, message)`` is called with each message, once per outage."""
        self.sinks = list(sinks)
        self.on_error = on_error
        self.error: SinkError | None = None
        self._say = say
        self._lost: dict[int, int] = {}       # id(sink) -> records lost in its outage
        # Sinks that find problems on their own threads (the alert webhook): asked for news
        # after every record. The others cost nothing here.
        self._talkers = [sink for sink in self.sinks
                         if type(sink).pop_messages is not Sink.pop_messages]
        # Sinks that show records written together as one (the console's event line); the
        # others get them one by one here, so each lost record is counted as it is lost.
        self._together = {id(sink) for sink in self.sinks
                          if type(sink).write_many is not Sink.write_many}

    def write(self, record: Mapping[str, Any]) -> None:
        for sink in self.sinks:
            self._deliver(sink, sink.write, record)
        self._relay()

    def write_many(self, records: Sequence[Mapping[str, Any]]) -> None:
        """Records written together (``Sink.write_many``): one call for the sinks that show
        them together, one ``write`` each for the others."""
        for sink in self.sinks:
            if id(sink) in self._together:
                self._deliver(sink, sink.write_many, records, len(records))
            else:
                for record in records:
                    self._deliver(sink, sink.write, record)
        self._relay()

    def _deliver(self, sink: Sink, call: Callable[[Any], None], what: Any,
                 count: int = 1) -> None:
        """``call(what)``, a failure said once per outage; ``count``: the records it holds."""
        try:
            call(what)
        except Exception as exc:
            self._failed(sink, exc, count)
        else:
            if id(sink) in self._lost:
                lost = self._lost.pop(id(sink))
                self._say(sink, f"{sink.name} writes again ({lost} record"
                                f"{'' if lost == 1 else 's'} lost while it could not)")

    def _relay(self) -> None:
        for sink in self._talkers:
            for message in sink.pop_messages():
                self._say(sink, message)

    def _failed(self, sink: Sink, exc: Exception, count: int = 1) -> None:
        first = id(sink) not in self._lost
        self._lost[id(sink)] = self._lost.get(id(sink), 0) + count
        if not first:
            return
        what = f"{sink.name} cannot be written ({type(exc).__name__}: {exc})"
        if self.on_error == "raise":
            if self.error is None:
                self.error = SinkError(what)
            self._say(sink, f"{what}; training stops after this step (on_sink_error='raise')")
        else:
            self._say(sink, f"{what}; training goes on and it is tried again with every "
                            "record (on_sink_error='warn')")

    def failing(self, sink: Sink) -> bool:
        return id(sink) in self._lost

    def drain(self) -> None:
        """Every sink finishes its own deliveries (bounded), and says what went wrong."""
        self._each(methodcaller("drain"))
        self._relay()

    def close(self) -> None:
        """Close every sink; a failing close is said like a failing write."""
        self._each(methodcaller("close"))

    def _each(self, call: Callable[[Sink], None]) -> None:
        for sink in self.sinks:
            try:
                call(sink)
            except Exception as exc:
                self._failed(sink, exc)
