"""The trend of one memory series over a time window: is it rising steadily, and how fast.

Samples are folded into ``BUCKETS`` buckets of ``window_s / BUCKETS`` seconds, each kept as
its median (a garbage collection, a transient buffer, a missed sample cannot move it). When
a bucket closes and the window is full, the trend is judged once:

- the rate is the Theil-Sen slope over the bucket medians (the median of every pairwise
  slope: robust to a few outliers, unlike a least-squares fit);
- "steadily" means the medians of the window's four quarters rise one after the other. One
  jump (an evaluation's buffers, a snapshot, a cache filled once) followed by a plateau
  leaves two quarters level, and a sawtooth (a pool that grows and is freed) does not rise
  quarter after quarter.

The cost is ~100 us per bucket (every ``window_s / 24`` seconds, 25 s by default), nothing
in between but an append.
"""
from __future__ import annotations

from collections import deque
from itertools import pairwise
from statistics import median

BUCKETS = 24
QUARTERS = 4
OWN_SHARE = 1 / 16     # the least share of the headroom's fall that makes the fall the rate


class MemoryTrend:
    def __init__(self, window_s: float):
        self.window_s, self.bucket_s = window_s, window_s / BUCKETS
        self._open: list[tuple[float, float, float]] = []     # (time, value, headroom)
        self._start: float | None = None
        # the closed buckets of the last window_s: fewer than BUCKETS when samples came
        # more slowly than one a bucket (a busy host's sampler thread)
        self._medians: deque[tuple[float, float, float]] = deque()

    def add(self, time: float, value: float, headroom: float) -> float | None:
        """One sample: ``value`` (the memory in use) and ``headroom`` (what is left before
        the limit), in one unit. Returns the rate (units per second) at which the headroom
        goes when this sample closes a bucket and the buckets span the window (0.0 when the
        series does not rise steadily); None between judgements."""
        if self._start is None:
            self._start = time
        judged = None
        if time - self._start >= self.bucket_s and self._open:
            self._medians.append((median(t for t, _, _ in self._open),
                                  median(v for _, v, _ in self._open),
                                  median(h for _, _, h in self._open)))
            self._open, self._start = [], time
            medians = self._medians
            while medians[0][0] < medians[-1][0] - self.window_s:
                medians.popleft()
            spans = medians[-1][0] - medians[0][0] >= self.window_s * (BUCKETS - 2) / BUCKETS
            if spans and len(medians) >= 2 * QUARTERS:
                judged = self._judge()
        self._open.append((time, value, headroom))
        return judged

    def _judge(self) -> float:
        points = list(self._medians)
        n = len(points)
        quarters = [median(v for _, v, _ in points[i * n // QUARTERS:(i + 1) * n // QUARTERS])
                    for i in range(QUARTERS)]
        if any(later <= earlier for earlier, later in pairwise(quarters)):
            return 0.0
        rate = theil_sen([t for t, _, _ in points], [v for _, v, _ in points])
        if rate <= 0:
            return 0.0
        # The headroom's own fall counts too when this series is a fair part of it: the other
        # ranks of the job on the host, leaking alike, eat the same memory (8 per host: 1/8
        # each). Another process's start alone does not make this one's trend urgent.
        falling = -theil_sen([t for t, _, _ in points], [h for _, _, h in points])
        return falling if rate < falling <= rate / OWN_SHARE else rate


def theil_sen(times: list[float], values: list[float]) -> float:
    """The median of the slopes between every pair of points with distinct times."""
    slopes = [(values[j] - values[i]) / (times[j] - times[i])
              for i in range(len(times)) for j in range(i + 1, len(times))
              if times[j] != times[i]]
    return median(slopes) if slopes else 0.0
