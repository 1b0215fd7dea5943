"""``throughput_drop``: the run has become slower than its own steady pace, or than the user's.

Two rules over the pace windows (``pace.Pace``: medians over the last ``window`` steps):

- the median step time is above ``factor`` times the run's own baseline (and slower by at
  least ``pace.MIN_SECONDS``, 5 ms). The baseline is learned from disjoint windows after
  the warm-up, ``GROUP`` at a time: the median window of the first group (of those it has,
  until it has them all), replaced only by a later group's median window that is faster.
  So a run that slows down step by step over hours is measured against its steady pace,
  not against a baseline that drifted with it, and one lucky fast window is not the
  baseline either;
- or, with ``baseline`` (samples/s per device, as MindSpore Transformers'
  ``throughput_baseline``), the median samples/s is below it.

The message says where the time went: the time outside the train step (``data``: the input
pipeline, other callbacks) or the step itself (``compute``), each against its value at the
baseline. Under data parallelism every rank's step takes as long as the slowest rank's (the
others wait inside the gradient all-reduce), so every rank finds the drop; the ranks share
their data times every step, so each names the ranks whose input pipeline slowed. Compute
time that grew cannot be placed from the host: the wait hides inside the collective.
One anomaly per episode, which ends when the median is back halfway to the baseline;
value = the median (s/step or samples/s), threshold = its limit.
"""
from __future__ import annotations

from collections.abc import Sequence

from ..anomaly import THROUGHPUT_DROP, Anomaly
from ..basics import format as fmt
from ..observation import StepObservation
from ..records import Anomaly as Record
from .base import Detector, Episode
from .pace import MIN_SECONDS, Pace

DATA, COMPUTE = "data", "compute"
GROUP = 5             # disjoint windows per baseline group (100 steps at the default window)
# A rank's data time names it when it grew by at least this share of the step's growth.
NAMING_SHARE = 0.5
Window = tuple[float, float, float, "list[float] | None"]


class ThroughputDropDetector(Detector):
    def __init__(self, pace: Pace, *, factor: float, baseline: float | None, rank: int = 0):
        self.pace, self.factor, self.baseline, self.rank = pace, factor, baseline, rank
        # (step_s, data_s, compute_s, each rank's data_s): the baseline window, and the
        # disjoint windows of the group being gathered
        self._best: Window | None = None
        self._group: list[Window] = []
        self._first_group = True
        self._limits, self._floor = (0.0, 0.0), 0.0
        self._episode = Episode()

    def update(self, observation: StepObservation) -> list[Anomaly]:
        self.pace.add(observation)
        if observation.segment_step == 1:
            self._best, self._group, self._first_group = None, [], True
        if self.pace.has_peers:         # judged once this step's data times are in
            return []
        return self._judge(observation.step)

    def update_peers(self, step: int, data_times: Sequence[float],
                     step_time_s: float | None) -> list[Anomaly]:
        self.pace.add_peers(data_times)
        return self._judge(step)

    def _judge(self, step: int) -> list[Anomaly]:
        pace = self.pace
        if not pace.ready:
            return []
        # a window disjoint from the last one; none while the run is slow, so that a slowdown
        # that starts while the first group is gathered does not become the baseline
        if pace.counted % pace.window == 0 and not self._episode.active:
            self._learn((pace.step_s, pace.data_s, pace.compute_s, pace.peer_data_s()))
        best = self._best
        assert best is not None
        # Within an episode the run must come halfway back (and the throughput 5% above the
        # user's baseline) to end it: a median hovering at the limit is one episode, not many.
        episode = self._episode
        ongoing = episode.active
        step_s = pace.step_s
        slow = step_s > self._limits[ongoing] and step_s >= self._floor
        if self.baseline is not None and pace.samples_per_s is not None:
            slow = slow or pace.samples_per_s < self.baseline * (1.05 if ongoing else 1.0)
        if slow == ongoing:                 # the common case, decided without a call
            return []
        if not episode.starts(slow):
            return []
        cause, ranks, where = self._cause(best, self.factor * best[0])
        if pace.step_s > self.factor * best[0]:
            value, threshold = pace.step_s, self.factor * best[0]
            what = (f"the median step time over the last {pace.window} steps is "
                    f"{fmt.duration(pace.step_s)}, {pace.step_s / best[0]:.3g}x the run's "
                    f"steady {fmt.duration(best[0])} (throughput_drop_factor {self.factor:g})")
        else:
            assert pace.samples_per_s is not None and self.baseline is not None
            value, threshold = pace.samples_per_s, self.baseline
            what = (f"the median throughput over the last {pace.window} steps is "
                    f"{pace.samples_per_s:.4g} samples/s, below throughput_baseline "
                    f"{self.baseline:g}")
        return [Anomaly(THROUGHPUT_DROP, step, value, threshold,
                        f"throughput dropped: {what}; {where}",
                        fields={Record.CAUSE: cause, Record.RANKS: ranks})]

    def _learn(self, window: Window) -> None:
        group = self._group
        group.append(window)
        middle = sorted(group, key=lambda w: w[0])[len(group) // 2]     # of 2: the slower
        full = len(group) == GROUP
        # the first group's median window, as far as the group goes; later, a faster one's
        if self._first_group or (full and self._best is not None and middle[0] < self._best[0]):
            self._best = middle
            # the limits in force out of an episode and in one, and the 5 ms floor
            self._limits = (self.factor * middle[0], (1 + (self.factor - 1) / 2) * middle[0])
            self._floor = middle[0] + MIN_SECONDS
        if full:
            self._group, self._first_group = [], False

    def _cause(self, best: Window, limit: float) -> tuple[str, list[int], str]:
        """Where the time of the window's slow steps (above ``limit``) went, against the
        baseline window; the current medians when no step is that slow (the user's
        baseline alone fired)."""
        pace = self.pace
        slow = pace.slow_steps(limit)
        step_now, data_now, peers_now = (slow if slow is not None else
                                         (pace.step_s, pace.data_s, pace.peer_data_s()))
        grown = max(step_now - best[0], 0.0)
        data_then, peers_then = best[1], best[3]
        if peers_then is not None and peers_now is not None \
                and len(peers_then) == len(peers_now):
            growth = [now - then for now, then in zip(peers_now, peers_then, strict=True)]
            ranks = [r for r, g in enumerate(growth) if g > 0 and g >= NAMING_SHARE * grown]
            if ranks:
                said = ", ".join(f"rank {r} {fmt.duration(peers_then[r])} -> "
                                 f"{fmt.duration(peers_now[r])}" for r in ranks)
                return DATA, ranks, (f"the data time (the input pipeline and other work "
                                     f"outside the train step) grew: {said} per step")
        elif data_now - data_then > 0 and data_now - data_then >= NAMING_SHARE * grown:
            return DATA, [self.rank], (
                f"the data time (the input pipeline and other work outside the train step) "
                f"grew on rank {self.rank}: {fmt.duration(data_then)} -> "
                f"{fmt.duration(data_now)} per step")
        return COMPUTE, [self.rank], (
            f"the compute time (the train step itself) grew on rank {self.rank}: "
            f"{fmt.duration(best[2])} -> {fmt.duration(max(step_now - data_now, 0.0))} per "
            "step (with data parallelism a slow device slows every rank: see the hardware "
            "records)")
