"""The sink interface: a view of the run that receives every record and decides nothing."""
from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any


class Sink:
    @property
    def name(self) -> str:
        """How messages about this sink name it: what it is and where it writes."""
        return type(self).__name__

    def write(self, record: Mapping[str, Any]) -> None:
        raise NotImplementedError

    def write_many(self, records: Sequence[Mapping[str, Any]]) -> None:
        """Records written together, at one moment: the ``anomaly`` records of what one
        step's review found (its detectors, the replay's ``transient_fault``, the hardware
        findings held for that step end). By default each goes through ``write``, so a sink
        that keeps one line per record (the run log) needs nothing more.

        Why a method and not a buffer in the view: a view that shows one step's anomalies
        as one event (the console's line, ``mindwatch.events``) learns here that they are
        all there, and says it now. Waiting for the next record instead would hold the line
        until the next step ends, minutes on a large model, or forever on a hang."""
        for record in records:
            self.write(record)

    def pop_messages(self) -> list[str]:
        """What the sink has to say since the last call (problems found on its own thread);
        the ``SinkSet`` says each as a notice after every record it writes."""
        return []

    def drain(self) -> None:
        """Finish, within a short bounded time, what the sink delivers on its own thread.
        Called on every sink before any is closed, so what it says still reaches the log."""

    def close(self) -> None:
        pass


@dataclass(frozen=True, kw_only=True)
class SinkContext:
    """Where a framework-provided sink writes: the run directory and this process's rank."""

    log_dir: str
    rank: int
    local_rank: int


SinkFactory = Callable[[SinkContext], Sink]
