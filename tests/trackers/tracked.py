"""A tracker's run as each tracker's own reader gives it back (tests/trackers/read_<tracker>.py),
so that the adapter tests compare every tracker with the run log the same way."""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class TrackedRun:
    name: str
    status: str                                       # the tracker's own word for the end
    verdict: str | None                               # as mindwatch put it in the tracker
    end_reason: str | None
    metrics: dict[str, list[tuple[int, float]]]       # name -> (step, value), by step
    config: dict[str, str]                            # the settings, as the tracker holds them
    events: list[str]                                 # the anomalies, as the tracker shows them
    files: dict[str, bytes] = field(default_factory=dict)   # attached file name -> content
