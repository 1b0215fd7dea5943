"""A step's times and rates: its duration, samples/s, tokens/s and MFU, its place in the run
segment, and the time left to the run's last step (``eta.Eta``)."""
from __future__ import annotations

from ..basics.clock import Clock
from ..observation import StepObservation
from .eta import Eta
from .segment import RunSegment
from .throughput import Throughput


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
