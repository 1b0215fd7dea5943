"""A step's times and rates: its duration, samples/s, tokens/s and MFU, its place in the run
segment, and the time left to the run's last step.

``eta_s`` is the steps left times the recent pace: the wall time over the last
``ETA_WINDOW`` observations divided by the steps they covered. Recent, so a run that slowed
down is not promised its old pace; wall time, so what every step pays on average
(checkpoints, evaluations between epochs, state steps) is in it; and not the segment's first
step, whose end starts the clock, so compilation is not. Nothing is made up: unknown until
two steps have ended, and absent without a known length.
"""
from __future__ import annotations

from collections import deque

from ..basics.clock import Clock
from ..observation import StepObservation
from .segment import RunSegment
from .throughput import Throughput

ETA_WINDOW = 50      # observations: long enough to average a checkpoint every few steps


class Eta:
    def __init__(self) -> None:
        self.total_steps: int | None = None
        self._ends: deque[tuple[int, float]] = deque(maxlen=ETA_WINDOW + 1)

    def begin(self, total_steps: int | None) -> None:
        self.total_steps = total_steps
        self._ends.clear()

    def update(self, step: int, now: float) -> float | None:
        """Seconds from ``now`` (monotonic) to the last step, after ``step`` ended now."""
        ends = self._ends
        if ends and step <= ends[-1][0]:        # the count went back (a new segment)
            ends.clear()
        ends.append((step, now))
        if self.total_steps is None:
            return None
        if step >= self.total_steps:
            return 0.0
        if len(ends) < 2:
            return None
        (first_step, first), (last_step, last) = ends[0], ends[-1]
        return (self.total_steps - step) * (last - first) / (last_step - first_step)


class StepTiming:
    def __init__(self, throughput: Throughput, clock: Clock):
        self.throughput, self.clock = throughput, clock
        self.eta = Eta()

    def fill(self, obs: StepObservation, segment: RunSegment, *, step_time_s: float | None,
             batch_size: int | None) -> float:
        """Fill in ``obs``'s times and rates; returns now (monotonic seconds). Without
        ``step_time_s`` a step lasted the time since the previous one ended."""
        now = self.clock.perf_counter()
        if step_time_s is None:
            step_time_s = (now - segment.last_perf) / obs.steps
        segment.last_perf = now
        segment.observed += 1
        obs.segment_step = segment.observed
        obs.step_time_s, obs.time = step_time_s, self.clock.time()
        if batch_size and step_time_s:
            obs.samples_per_s = batch_size / step_time_s
        obs.tokens_per_s, obs.mfu = self.throughput.rates(obs.samples_per_s)
        obs.eta_s = self.eta.update(obs.step, now)
        return now
