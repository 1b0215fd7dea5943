"""The run's pace, as ``throughput_drop`` and ``data_bound`` read it: windows of step time,
data time and samples/s over the last ``window`` steps of the current run segment.

Every number is a median over the window, so one slow step (a checkpoint save, the first
step of an epoch, a state step, a compilation) never moves it: half the window must be slow.
Left out: the first ``warmup`` steps of each segment (compilation, caches, the first batches
of a cold input pipeline), and every withheld update and the step after it (a withheld step
is computed again, ``replay``, and a rewind restores the weights, costs that belong to the
fault, not to the pace). A new segment (another ``model.train``, a resumed run) learns its
pace anew: its batch size or its model may differ.

``data_s`` is the time outside the train step (``data_time_s``: fetching the batch, other
callbacks), per training step; ``compute_s`` the rest of the step time. One ``Pace`` is fed
once per observation, by whichever of its readers sees the observation first.

Every rank's data time (``add_peers``, after each step's exchange) is kept in a numpy ring,
one row per rank, lined up with the windows' steps: a step costs one column written at any
number of ranks, and only the readers that come once per window (``peer_data_s``) or once
per drop (``slow_steps``) sort it.
"""
from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

from ..basics.medians import short_row_medians
from ..observation import StepObservation

if TYPE_CHECKING:
    import numpy as np

# An absolute floor under both rules: on millisecond steps a loaded host's scheduling noise
# alone moves a window's median by half, and nobody waits long for a 2 ms step either way.
MIN_SECONDS = 0.005
INF = float("inf")


class Slow(NamedTuple):
    """The slow steps of a window (``Pace.slow_steps``)."""
    step_s: float                      # their median step time
    data_s: float                      # their median data time
    peers: np.ndarray | None           # each rank's median data time at them (float64)
    start: float                       # the first one's start, Unix s
    end: float                         # the last one's end


def _median(values: Iterable[float]) -> float:
    ordered = sorted(values)        # ~0.5 us for 20 floats: cheaper than statistics.median
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


class Pace:
    """``add(obs)`` once per observation; then, when ``ready``: ``step_s``, ``data_s``,
    ``compute_s`` (window medians, seconds per step), ``samples_per_s`` (None when unknown)
    and ``peer_data_s`` (each rank's median data time, when the ranks share them)."""

    def __init__(self, *, window: int, warmup: int, samples: bool = True):
        # samples: keep the samples/s window (only throughput_baseline reads it)
        self.window, self.warmup, self.samples = window, warmup, samples
        self._mid, self._odd = window // 2, window % 2 == 1
        self._seen: StepObservation | None = None
        self._steps: deque[float] = deque(maxlen=window)
        self._data: deque[float] = deque(maxlen=window)
        self._times: deque[float] = deque(maxlen=window)     # each step's end, Unix s
        self._samples: deque[float] = deque(maxlen=window)
        # Every rank's data time at the windows' steps (seconds), one row per rank: a ring
        # whose column ``_peer_count % window`` is written next, as the deques it replaced
        # appended (oldest first: column ``(_peer_count - length + i) % window`` is the i-th
        # oldest). float32 for the exchange's times (exact, and it sorts twice as fast),
        # float64 for any other input. None until this segment's first exchange.
        self._peers: Any = None
        self._peer_count = 0
        self._after_skip = False
        self._counted_last = False      # the latest observation went into the windows
        self.counted = 0                # steps in the windows so far, this segment
        self.ready = False
        self.step_s = self.data_s = self.compute_s = 0.0
        self.samples_per_s: float | None = None

    def add(self, obs: StepObservation) -> None:
        if obs is self._seen:
            return
        self._seen = obs
        if obs.segment_step == 1:                   # a new segment learns its own pace
            for window in (self._steps, self._data, self._samples, self._times):
                window.clear()
            self._peers, self._peer_count, self.counted = None, 0, 0
        # Written for the per-step cost (the budget of all three trend rules is 5 us): no
        # helper calls on the common path; NaN fails every comparison below.
        after_skip, self._after_skip = self._after_skip, obs.skipped
        step_s = obs.step_time_s
        if obs.segment_step <= self.warmup or obs.skipped or after_skip or step_s is None \
                or not 0 < step_s < INF:
            self.ready = self._counted_last = False
            return
        self._counted_last = True
        data = obs.data_time_s
        self.counted += 1
        self._steps.append(step_s)
        self._times.append(obs.time)
        self._data.append(min(data / obs.steps, step_s) if data is not None and 0 <= data < INF
                          else 0.0)
        samples = obs.samples_per_s
        if self.samples and samples is not None and 0 <= samples < INF:
            self._samples.append(samples)
        self.ready = len(self._steps) == self.window
        if self.ready:
            mid, odd = self._mid, self._odd
            ordered, by_data = sorted(self._steps), sorted(self._data)
            self.step_s = ordered[mid] if odd else (ordered[mid - 1] + ordered[mid]) / 2
            self.data_s = by_data[mid] if odd else (by_data[mid - 1] + by_data[mid]) / 2
            self.compute_s = max(self.step_s - self.data_s, 0.0)
            self.samples_per_s = (_median(self._samples) if len(self._samples) == self.window
                                  else None)

    @property
    def has_peers(self) -> bool:
        """The ranks share their data times after each step (this segment has had some)."""
        return self._peers is not None and len(self._peers) > 0

    def add_peers(self, data_times: Sequence[float] | np.ndarray) -> None:
        """Every rank's data time of the latest step, in rank order (the ranks' exchange: a
        list, or its numpy array, read without a copy); kept for the steps the windows kept,
        so that they line up. A time that is not finite or is negative counts as 0."""
        import numpy as np

        values = np.asarray(data_times)
        if values.dtype == object:          # a custom loop's list holding None
            values = np.array([np.nan if v is None else float(v) for v in data_times])
        elif values.dtype != np.float32:
            values = values.astype(np.float64)      # float(value) of each
        ring = self._peers
        if ring is None or len(ring) != len(values):
            # the ranks changed (or a new segment): their windows start empty
            ring = self._peers = np.zeros((len(values), self.window), values.dtype)
            self._peer_count = 0
        if not self._counted_last:
            return
        if ring.dtype == np.float32 and values.dtype != np.float32:
            ring = self._peers = ring.astype(np.float64)    # widened for good, exactly
        # NaN and infinities fail both tests (no warning: comparisons do not warn)
        kept = np.isfinite(values) & (values >= 0)
        ring[:, self._peer_count % self.window] = np.where(kept, values, 0)
        self._peer_count += 1

    @property
    def latest_time(self) -> float:
        """The latest counted step's end, Unix seconds."""
        return self._times[-1]

    def span(self) -> tuple[float, float]:
        """When the window's steps ran: the first one's start and the last one's end (Unix
        seconds)."""
        return self._times[0] - self._steps[0], self._times[-1]

    def slow_steps(self, limit: float) -> Slow | None:
        """Over the window's steps slower than ``limit`` seconds: the median step time, the
        median data time, and each rank's median data time at those steps (None on one
        rank), and when they ran; None when no step is. Where the time of the slow steps
        went, which medians of the two columns over the whole window cannot say while the
        window is half slow. Medians, not means: one step among them that a loaded host
        stalled for 0.4 s (compute) would outweigh five that waited 40 ms for their batch."""
        slow = [i for i, step_s in enumerate(self._steps) if step_s > limit]
        if not slow:
            return None
        peers = None
        if self._peer_rows() >= 2 and self._peer_length() == len(self._steps):
            # the ring's columns of those steps (the i-th oldest of each rank's times)
            oldest = self._peer_count - len(self._steps)
            import numpy as np

            peers = short_row_medians(
                np, self._peers[:, [(oldest + i) % self.window for i in slow]])
        return Slow(_median(self._steps[i] for i in slow),
                    _median(self._data[i] for i in slow), peers,
                    min(self._times[i] - self._steps[i] for i in slow),
                    max(self._times[i] for i in slow))

    def peer_data_s(self) -> np.ndarray | None:
        """Each rank's median data time over the window (float64, in rank order); None until
        the windows are full (or on one rank)."""
        if self._peer_rows() < 2 or self._peer_length() < self.window:
            return None
        import numpy as np

        return short_row_medians(np, self._peers)   # the ring's column order does not matter

    def _peer_rows(self) -> int:
        return 0 if self._peers is None else len(self._peers)

    def _peer_length(self) -> int:
        """How many steps each rank's ring holds."""
        return min(self._peer_count, self.window)


