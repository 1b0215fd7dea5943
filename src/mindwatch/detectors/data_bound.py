"""``data_bound``: the devices wait for the input pipeline.

The share of step time spent outside the train step (``data_time_s``: fetching and preparing
the batch, plus other callbacks' work) is the median data time over the median step time of
the last ``window`` steps (``pace.Pace``). Above ``share`` (and at least
``pace.MIN_SECONDS``, 5 ms, of data time) the run is input-bound: more dataset workers
(``num_parallel_workers``), a larger prefetch, or preprocessing moved off the step would
speed it up, and a faster device would not. One anomaly per episode (it ends below 80% of
``share``); value = the share, threshold = ``share``.

In dataset sink mode the input pipeline feeds the device's queue while the device computes;
a starving queue shows there as step time (``throughput_drop``), not as data time.
"""
from __future__ import annotations

from ..anomaly import DATA_BOUND, Anomaly
from ..basics import format as fmt
from ..observation import StepObservation
from .base import Detector, Episode
from .pace import MIN_SECONDS, Pace


class DataBoundDetector(Detector):
    def __init__(self, pace: Pace, *, share: float | None):
        self.pace, self.share = pace, share
        self._episode = Episode()

    def update(self, observation: StepObservation) -> list[Anomaly]:
        pace = self.pace
        pace.add(observation)
        if self.share is None or not pace.ready or pace.step_s <= 0:
            return []
        share = pace.data_s / pace.step_s
        # an episode ends below 80% of the limit: a share hovering at it is one episode
        episode = self._episode
        ongoing = episode.active
        bound = share > self.share * (0.8 if ongoing else 1.0) and pace.data_s >= MIN_SECONDS
        if bound == ongoing or not episode.starts(bound):
            return []
        return [Anomaly(
            DATA_BOUND, observation.step, share, self.share,
            f"input-bound: {share:.0%} of each step is spent outside the train step (median "
            f"data time {fmt.duration(pace.data_s)} of {fmt.duration(pace.step_s)} per step "
            f"over the last {pace.window} steps; data_bound_share {self.share:g}); more "
            f"dataset workers or prefetching, or lighter preprocessing, would speed it up")]
