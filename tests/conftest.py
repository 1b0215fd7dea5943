import io

import pytest


class FakeClock:
    """Deterministic time: ``advance`` moves both the wall clock and the monotonic one."""

    def __init__(self, start: float = 1_700_000_000.0):
        self.now = start
        self.perf = 100.0

    def time(self) -> float:
        return self.now

    def perf_counter(self) -> float:
        return self.perf

    def advance(self, seconds: float) -> None:
        self.now += seconds
        self.perf += seconds


@pytest.fixture
def clock():
    return FakeClock()


@pytest.fixture
def stream():
    return io.StringIO()
