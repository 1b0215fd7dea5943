"""The sink interface: a view of the run that receives every record and decides nothing."""
from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any


class Sink:
    @property
    def name(self) -> str:
        """How messages about this sink name it: what it is and where it writes."""
        return type(self).__name__

    def write(self, record: Mapping[str, Any]) -> None:
        raise NotImplementedError

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
