"""``memory_growth``: memory that rises steadily toward its limit, found before it runs out.

Two kinds of series, from the hardware samples:

- ``host``: this process's resident memory (``rss_gb``) rising; its headroom is the host's
  available memory, which the other processes of the host (other ranks) may eat too;
- ``npu:0``, ``gpu:1``, ...: a device's used memory (npu-smi's HBM, NVML) rising; its
  headroom is that device's total less what is used.

Each series is judged over windows of every scale, from ``window_s`` doubling up
(``memory_trend.MemoryTrend``: a robust slope, and a rise quarter after quarter, so one jump
is no trend). A steady rise over a window of W seconds is urgent when, at its rate, the
headroom runs out within ``LEAD`` x W (``projected_exhaustion_s``): the rise has been watched
for at least a quarter of the time it leaves. So the evidence asked for grows with the time
there is: a leak that empties the host in two minutes is found after 30 s of it, one that
takes three weeks after five days; either is found while more than half its time remains
(the window that finds it is at most twice the shortest that could, ``benchmarks/faults.py``
measures the grid). A short window flags only a rise steep enough to matter that soon, which
a warm-up's remainder, an evaluation's buffers or a cache filling never are.

``horizon_s`` (None: no cap) leaves out leaks that would take longer than that to run out.
One anomaly per series and episode; an episode ends when, judged by the window that found it
(or a longer one), no rise has been urgent for as long as that window. value =
``projected_exhaustion_s``, threshold = the limit it was under (``LEAD`` x W, or
``horizon_s`` when lower).

Samples taken before the current run segment's first ``warmup`` steps are left out: graph
compilation, the memory pools and the input pipeline's buffers grow at the start of every
``model.train``, and that growth stops.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..anomaly import MEMORY_GROWTH, Anomaly
from ..basics import format as fmt
from ..observation import HardwareSample
from ..records import Anomaly as Record
from ..records import device_label
from .base import Detector, is_finite
from .hardware import HOST
from .memory_trend import LEAD, MemoryTrend


@dataclass
class _Episode:
    window_s: float      # the window that found the rise
    last_urgent: float   # the time of the latest urgent judgement, seconds


class MemoryGrowthDetector(Detector):
    watches_hardware = True

    def __init__(self, *, window_s: float | None, horizon_s: float | None, warmup: int):
        self.window_s, self.horizon_s, self.warmup = window_s, horizon_s, warmup
        self._trends: dict[str, MemoryTrend] = {}
        self._episodes: dict[str, _Episode] = {}
        self._segment_steps = 0

    def update_hardware(self, sample: HardwareSample) -> list[Anomaly]:
        steps = sample.segment_steps
        if self.window_s is None or steps is None:
            return []
        if steps < self._segment_steps:         # a new segment: its start grows anew
            self._trends.clear()
        self._segment_steps = steps
        if steps < self.warmup:
            return []
        found = []
        used, available = sample.rss_gb, sample.mem_available_gb
        if is_finite(used) and is_finite(available):
            found += self._series(HOST, sample.time, used, available, "GB",
                                  f"this process's host memory (RSS {used:.3g} GB, "
                                  f"{available:.3g} GB of the host available)")
        for device in sample.devices:
            used, total = device.mem_used_mb, device.mem_total_mb
            if is_finite(used) and is_finite(total) and total > 0:
                label = device_label(device, " ").upper()
                found += self._series(device_label(device, ":"), sample.time, used,
                                      total - used, "MB", f"{label} memory ({used:.0f} of "
                                      f"{total:.0f} MB used)")
        return found

    def _series(self, key: str, time: float, used: float, headroom: float, unit: str,
                what: str) -> list[Anomaly]:
        trend = self._trends.get(key)
        if trend is None:
            assert self.window_s is not None
            trend = self._trends[key] = MemoryTrend(self.window_s)
        judged = trend.add(time, used, headroom)
        if not judged:
            return []
        urgent = None           # the shortest window whose rise runs out within its limit
        for judgement in judged:
            if judgement.rate <= 0:
                continue
            projected = max(headroom, 0.0) / judgement.rate
            limit = LEAD * judgement.window_s
            if self.horizon_s is not None:
                limit = min(limit, self.horizon_s)
            if projected < limit:
                urgent = (judgement, projected, limit)
                break
        episode = self._episodes.get(key)
        if episode is not None:
            # calm for as long as the window that found it, as that window (or a longer
            # one) judges: the shorter ones never see a slow leak, a resumed run's long
            # windows fill again before they can judge
            if urgent is not None:
                episode.last_urgent = time
            elif time - episode.last_urgent >= episode.window_s and any(
                    j.window_s >= episode.window_s for j in judged):
                del self._episodes[key]
            return []
        if urgent is None:
            return []
        judgement, projected, limit = urgent
        self._episodes[key] = _Episode(judgement.window_s, time)
        return [Anomaly(
            MEMORY_GROWTH, None, projected, limit,
            f"memory growing: {what} rose steadily by {fmt.memory_rate(judgement.rate, unit)} "
            f"over the last "
            f"{fmt.duration(judgement.window_s)}; at this rate it runs out in "
            f"{fmt.duration(projected)}",
            fields={Record.MEMORY: key, Record.PROJECTED_EXHAUSTION_S: projected})]

    def state_dict(self) -> dict[str, Any]:
        return {"episodes": {key: [e.window_s, e.last_urgent]
                             for key, e in self._episodes.items()}}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        for key, value in state.get("episodes", {}).items():
            # before the ladder of windows a bool said whether an episode was on
            if isinstance(value, list) and len(value) == 2:
                self._episodes[str(key)] = _Episode(float(value[0]), float(value[1]))
