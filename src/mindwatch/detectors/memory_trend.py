"""The trend of one memory series at every time scale: is it rising steadily, and how fast.

A leak must be found while most of the time it leaves remains, whatever its rate: 10 GB/min
empties a host in two minutes, 1 GB/day in three weeks. No single window serves both: a
short one cannot tell a slow leak from noise, a long one sees a fast leak only after it has
killed the job. So each series is judged over a ladder of windows, ``shortest_s`` doubling
up to ``MAX_WINDOW_S``, and a rise counts as soon as one of them shows it (``Judgement``);
``memory_growth`` decides which rises are urgent (the window against the time left).

Each window folds its samples into ``BUCKETS`` buckets of ``window_s / BUCKETS`` seconds,
each kept as its median (a garbage collection, a transient buffer, a missed sample cannot
move it); the shortest window takes the samples, each longer one the closed buckets of the
window below, so memory and time stay O(1) per sample at every scale. When a bucket closes
and the window's buckets span it, the window is judged once:

- the rate is the Theil-Sen slope over the bucket medians (the median of every pairwise
  slope: robust to a few outliers, unlike a least-squares fit);
- "steadily" means the medians of the window's four quarters rise one after the other. One
  jump (an evaluation's buffers, a snapshot, a cache filled once) followed by a plateau
  leaves two quarters level, and a sawtooth (a pool that grows and is freed) does not rise
  quarter after quarter over a window longer than its period;
- and the series has not fallen back by half that rise within the ``LEAD`` windows before
  (``_fell_back``): each ramp of a sawtooth is a steady rise to a window no longer than
  itself, but a leak does not give its memory back.

The cost: ~100 us per judgement of the shortest window (one per sample, every 2 s by
default), half as many for each window above it; nothing else but appends.
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from itertools import pairwise
from statistics import median
from typing import NamedTuple

BUCKETS = 24
QUARTERS = 4
OWN_SHARE = 1 / 16     # the least share of the headroom's fall that makes the fall the rate
MAX_WINDOW_S = 128 * 86400.0    # the longest window: a slow leak on the largest device
LEAD = 4.0        # a rise over W seconds is urgent when it runs out within LEAD x W
LOOKBACK_RUNGS = 2                 # the rung LEAD windows long: 2 ** 2 = LEAD


class Point(NamedTuple):
    time: float          # seconds
    value: float         # the memory in use
    headroom: float      # what is left before the limit, in the same unit


@dataclass(frozen=True)
class Judgement:
    window_s: float      # the window judged
    rate: float          # units per second at which the headroom goes; 0.0: no steady rise


class _Window:
    """One rung of the ladder: buckets of ``window_s / BUCKETS`` seconds over ``window_s``."""

    def __init__(self, window_s: float):
        self.window_s, self.bucket_s = window_s, window_s / BUCKETS
        self._open: list[Point] = []
        self._start: float | None = None
        # the closed buckets of the last window_s: fewer than BUCKETS when points came more
        # slowly than one a bucket (a busy host's sampler thread, the shortest window)
        self.medians: deque[Point] = deque()

    def add(self, point: Point) -> Point | None:
        """One point; returns the median of the bucket it closed, if it closed one."""
        if self._start is None:
            self._start = point.time
        closed = None
        if point.time - self._start >= self.bucket_s and self._open:
            closed = Point(median(p.time for p in self._open),
                           median(p.value for p in self._open),
                           median(p.headroom for p in self._open))
            self._open, self._start = [], point.time
            medians = self.medians
            medians.append(closed)
            while medians[0].time < closed.time - self.window_s:
                medians.popleft()
        self._open.append(point)
        return closed

    def judge(self) -> float | None:
        """The rate (see ``MemoryTrend.add``) when the buckets span the window, else None."""
        medians = self.medians
        spans = medians[-1].time - medians[0].time >= self.window_s * (BUCKETS - 2) / BUCKETS
        if not spans or len(medians) < 2 * QUARTERS:
            return None
        points = list(medians)
        n = len(points)
        quarters = [median(p.value for p in points[i * n // QUARTERS:(i + 1) * n // QUARTERS])
                    for i in range(QUARTERS)]
        if any(later <= earlier for earlier, later in pairwise(quarters)):
            return 0.0
        times = [p.time for p in points]
        rate = theil_sen(times, [p.value for p in points])
        if rate <= 0:
            return 0.0
        # The headroom's own fall counts too when this series is a fair part of it: the other
        # ranks of the job on the host, leaking alike, eat the same memory (8 per host: 1/8
        # each). Another process's start alone does not make this one's trend urgent.
        falling = -theil_sen(times, [p.headroom for p in points])
        return falling if rate < falling <= rate / OWN_SHARE else rate


class MemoryTrend:
    def __init__(self, shortest_s: float):
        self._ladder = [_Window(shortest_s)]
        while self._ladder[-1].window_s * 2 <= MAX_WINDOW_S:
            self._ladder.append(_Window(self._ladder[-1].window_s * 2))

    def add(self, time: float, value: float, headroom: float) -> list[Judgement]:
        """One sample: ``value`` (the memory in use) and ``headroom`` (what is left before the
        limit), in one unit. Returns a judgement for each window whose bucket this sample
        closed and whose buckets span it, shortest first: the rate (units per second) at
        which the headroom goes, 0.0 when the series does not rise steadily there."""
        judged = []
        point: Point | None = Point(time, value, headroom)
        for rung, window in enumerate(self._ladder):
            assert point is not None
            point = window.add(point)
            if point is None:
                break
            rate = window.judge()
            if rate is not None:
                judged.append(Judgement(window.window_s, 0.0 if rate > 0 and
                                        self._fell_back(rung, value) else rate))
        return judged

    def _fell_back(self, rung: int, latest: float) -> bool:
        """Whether the series fell by half the window's rise, or more, within the ``LEAD``
        windows before this one's end: a sawtooth (a pool that grows and is freed), whose
        every ramp is a steady rise to a window no longer than the ramp. A leak does not
        give its memory back; and a ramp that would run out within ``LEAD`` windows must be
        a quarter of the headroom or more, far above a collection's or the noise's dips."""
        window = self._ladder[rung]
        recent = window.medians
        quarter = max(1, len(recent) // QUARTERS)
        rise = (median(p.value for p in list(recent)[-quarter:])
                - median(p.value for p in list(recent)[:quarter]))
        # the coarser buckets of the rung LEAD windows long, before this window's
        context = self._ladder[min(rung + LOOKBACK_RUNGS, len(self._ladder) - 1)].medians
        since = recent[-1].time - LEAD * window.window_s
        values = [p.value for p in context if since <= p.time < recent[0].time]
        values += [p.value for p in recent]
        # what came after this window's last closed bucket: the shortest window's buckets
        # (one a sample), and the sample being added
        values += [p.value for p in self._ladder[0].medians if p.time > recent[-1].time]
        values.append(latest)
        highest, drop = values[0], 0.0
        for value in values[1:]:
            drop = max(drop, highest - value)
            highest = max(highest, value)
        return drop >= rise / 2


def theil_sen(times: list[float], values: list[float]) -> float:
    """The median of the slopes between every pair of points with distinct times."""
    slopes = [(values[j] - values[i]) / (times[j] - times[i])
              for i in range(len(times)) for j in range(i + 1, len(times))
              if times[j] != times[i]]
    return median(slopes) if slopes else 0.0
