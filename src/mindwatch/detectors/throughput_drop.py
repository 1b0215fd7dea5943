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

The message says where the time went: to the host's other processes (``host``: they took
more of its CPU, held most of a saturated one, or left this process a smaller share as its
step grew, and its threads waited for a CPU per step longer than the baseline's contention
gives the CPU it uses per step now, ``host_load.explains``: so a run that does more work
per step on a host as busy as at its baseline is no contention), or, within the run's own
time, outside the train step (``data``: the input pipeline, other
callbacks) or in the step itself (``compute``), each against its value at the baseline.
Under data parallelism every rank's step takes as long as the slowest rank's (the others
wait inside the gradient all-reduce), so every rank finds the drop; the ranks share their
data times every step, so each names the ranks whose input pipeline slowed. Compute time
that grew cannot be placed from the host: the wait hides inside the collective.
One anomaly per episode, which ends when the median is back halfway to the baseline;
value = the median (s/step or samples/s), threshold = its limit.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..anomaly import THROUGHPUT_DROP, Anomaly
from ..basics import format as fmt
from ..observation import HardwareSample, StepObservation
from ..records import Anomaly as Record
from . import host_load
from .base import Detector, Episode
from .host_load import HostLoad, Load
from .pace import MIN_SECONDS, Pace

if TYPE_CHECKING:
    import numpy as np

DATA, COMPUTE, HOST = "data", "compute", "host"
GROUP = 5             # disjoint windows per baseline group (100 steps at the default window)
# A rank's data time names it when it grew by at least this share of the step's growth.
NAMING_SHARE = 0.5


@dataclass
class Window:
    """One window of the pace: its medians, each rank's data time, when it ran, and the host's
    load then (None until the sampler has covered it)."""
    step_s: float
    data_s: float
    compute_s: float
    peers: np.ndarray | None            # each rank's median data time (float64)
    span: tuple[float, float]
    host: Load | None


@dataclass
class _Drop:
    value: float
    threshold: float
    what: str
    own: tuple[str, list[int], str]     # the cause within the run: cause, ranks, where
    best: Window
    step_s: float                       # the slow steps' median
    start: float                        # when the first slow step began, Unix s
    deadline: float                     # when to give up waiting for the host's load


class ThroughputDropDetector(Detector):
    def __init__(self, pace: Pace, *, factor: float, baseline: float | None, rank: int = 0):
        self.pace, self.factor, self.baseline, self.rank = pace, factor, baseline, rank
        # the baseline window, and the disjoint windows of the group being gathered
        self._best: Window | None = None
        self._group: list[Window] = []
        self._first_group = True
        self._limits, self._floor = (0.0, 0.0), 0.0
        self._episode = Episode()
        self._host = HostLoad()
        self._pending: _Drop | None = None      # found, waiting for the host's load

    def update_hardware(self, sample: HardwareSample) -> list[Anomaly]:
        self._host.add(sample)
        return []

    def update(self, observation: StepObservation) -> list[Anomaly]:
        self.pace.add(observation)
        if observation.segment_step == 1:
            self._best, self._group, self._first_group = None, [], True
            # an episode against the old baseline ends with it: one left open would keep the
            # new segment from learning its baseline (and _judge would find none)
            self._pending, self._episode.active = None, False
        if self.pace.has_peers:         # judged once this step's data times are in
            return []
        return self._judge(observation.step)

    def update_peers(self, step: int, data_times: Sequence[float] | np.ndarray,
                     step_time_s: float | None) -> list[Anomaly]:
        self.pace.add_peers(data_times)
        return self._judge(step)

    def _judge(self, step: int) -> list[Anomaly]:
        pace = self.pace
        if not pace.ready:
            return []
        found = self._resolve(step)
        # a window disjoint from the last one; none while the run is slow, so that a slowdown
        # that starts while the first group is gathered does not become the baseline
        if pace.counted % pace.window == 0 and not self._episode.active:
            span = pace.span()
            self._learn(Window(pace.step_s, pace.data_s, pace.compute_s, pace.peer_data_s(),
                               span, self._host.over(*span, latest=False)))
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
            return found
        if not episode.starts(slow):
            return found
        self._pending = self._drop(best)
        return found + self._resolve(step)

    def _drop(self, best: Window) -> _Drop:
        """The drop just found: its value, threshold and what it is, where the time went
        within the run, and the slow steps' time (the host's share is judged over it)."""
        pace = self.pace
        if pace.step_s > self.factor * best.step_s:
            value, threshold = pace.step_s, self.factor * best.step_s
            what = (f"the median step time over the last {pace.window} steps is "
                    f"{fmt.duration(pace.step_s)}, {pace.step_s / best.step_s:.3g}x the run's "
                    f"steady {fmt.duration(best.step_s)} (throughput_drop_factor {self.factor:g})")
        else:
            assert pace.samples_per_s is not None and self.baseline is not None
            value, threshold = pace.samples_per_s, self.baseline
            what = (f"the median throughput over the last {pace.window} steps is "
                    f"{pace.samples_per_s:.4g} samples/s, below throughput_baseline "
                    f"{self.baseline:g}")
        # the window's slow steps (above the limit); the whole window when none is that slow
        # (the user's baseline alone fired)
        slow = pace.slow_steps(self.factor * best.step_s)
        if slow is not None:
            step_now, data_now, peers_now = slow.step_s, slow.data_s, slow.peers
            start = slow.start
        else:
            step_now, data_now, peers_now = pace.step_s, pace.data_s, pace.peer_data_s()
            start = pace.span()[0]
        own = self._own_cause(best, step_now, data_now, peers_now)
        return _Drop(value, threshold, what, own, best, step_now, start,
                     self._host.deadline(pace.latest_time))

    def _resolve(self, step: int) -> list[Anomaly]:
        """The drop found, once the host's load over its slow steps is known: when a hardware
        sample has covered them (up to one sampler interval after it was found), or when
        none will (no sampler, or it fell silent)."""
        drop = self._pending
        if drop is None:
            return []
        now = self.pace.latest_time
        if not self._host.covers(drop.start) and now < drop.deadline:
            return []
        self._pending = None
        cause, ranks, where = drop.own
        best = drop.best
        # the samples that cover the baseline window by now: as it was learned they covered
        # its start at most (one that ends after it comes up to an interval later), and the
        # time before it may have been busier or quieter. The one kept then where they are
        # gone (KEPT)
        best.host = self._host.over(*best.span, latest=False) or best.host
        load = self._host.since(drop.start, now)
        if best.host is not None and load is not None and \
                host_load.explains(best.host, load, best.step_s, drop.step_s):
            cause, ranks = HOST, [self.rank]
            where = host_load.describe(best.host, load, best.step_s, drop.step_s)
        return [Anomaly(THROUGHPUT_DROP, step, drop.value, drop.threshold,
                        f"throughput dropped: {drop.what}; {where}",
                        fields={Record.CAUSE: cause, Record.RANKS: ranks})]

    def _learn(self, window: Window) -> None:
        group = self._group
        group.append(window)
        middle = sorted(group, key=lambda w: w.step_s)[len(group) // 2]     # of 2: the slower
        full = len(group) == GROUP
        # the first group's median window, as far as the group goes; later, a faster one's
        best = self._best
        if self._first_group or (full and best is not None and middle.step_s < best.step_s):
            self._best, step_s = middle, middle.step_s
            # the limits in force out of an episode and in one, and the 5 ms floor
            self._limits = (self.factor * step_s, (1 + (self.factor - 1) / 2) * step_s)
            self._floor = step_s + MIN_SECONDS
        if full:
            self._group, self._first_group = [], False

    def _own_cause(self, best: Window, step_now: float, data_now: float,
                   peers_now: np.ndarray | None) -> tuple[str, list[int], str]:
        """Where, within the run's own time, the slow steps' time went against the baseline
        window: outside the train step (on which ranks) or in it."""
        grown = max(step_now - best.step_s, 0.0)
        data_then, peers_then = best.data_s, best.peers
        if peers_then is not None and peers_now is not None \
                and len(peers_then) == len(peers_now):
            import numpy as np

            growth = peers_now - peers_then         # float64, as Python's floats subtract
            ranks = np.flatnonzero((growth > 0) & (growth >= NAMING_SHARE * grown)).tolist()
            if ranks:
                said = ", ".join(f"rank {r} {fmt.duration(float(peers_then[r]))} -> "
                                 f"{fmt.duration(float(peers_now[r]))}" for r in ranks)
                return DATA, ranks, (f"the data time (the input pipeline and other work "
                                     f"outside the train step) grew: {said} per step")
        elif data_now - data_then > 0 and data_now - data_then >= NAMING_SHARE * grown:
            return DATA, [self.rank], (
                f"the data time (the input pipeline and other work outside the train step) "
                f"grew on rank {self.rank}: {fmt.duration(data_then)} -> "
                f"{fmt.duration(data_now)} per step")
        return COMPUTE, [self.rank], (
            f"the compute time (the train step itself) grew on rank {self.rank}: "
            f"{fmt.duration(best.compute_s)} -> {fmt.duration(max(step_now - data_now, 0.0))} per "
            "step (with data parallelism a slow device slows every rank: see the hardware "
            "records)")
