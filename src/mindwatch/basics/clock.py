"""Time comes from one injectable clock, so tests can drive it exactly."""
from __future__ import annotations

import time
from typing import Protocol


class Clock(Protocol):
    def time(self) -> float: ...            # Unix seconds, for record timestamps
    def perf_counter(self) -> float: ...    # monotonic seconds, for durations


class SystemClock:
    def time(self) -> float:
        return time.time()

    def perf_counter(self) -> float:
        return time.perf_counter()
