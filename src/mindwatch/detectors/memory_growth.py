"""``memory_growth``: memory that rises steadily toward its limit, found before it runs out.

Two kinds of series, from the hardware samples:

- ``host``: this process's resident memory (``rss_gb``) rising; its headroom is the host's
  available memory, which the other processes of the host (other ranks) may eat too;
- ``npu:0``, ``gpu:1``, ...: a device's used memory (npu-smi's HBM, NVML) rising; its
  headroom is that device's total less what is used.

Each is judged over the last ``window_s`` seconds (``memory_trend.MemoryTrend``: a robust
slope, and a rise quarter after quarter, so one jump is no trend). ``projected_exhaustion_s``
is the headroom over the rate; the anomaly fires when that is under ``horizon_s``, once per
series and episode (an episode ends after a window's worth of judgements, ``BUCKETS``, with
no urgent trend). value = ``projected_exhaustion_s``, threshold = ``horizon_s``.

Samples taken before the current run segment's first ``warmup`` steps are left out: graph
compilation, the memory pools and the input pipeline's buffers grow at the start of every
``model.train``, and that growth stops.
"""
from __future__ import annotations

from typing import Any

from ..anomaly import MEMORY_GROWTH, Anomaly
from ..basics import format as fmt
from ..observation import HardwareSample
from ..records import Anomaly as Record
from ..records import device_label
from .base import Detector, Episode, is_finite
from .hardware import HOST
from .memory_trend import BUCKETS, MemoryTrend


class MemoryGrowthDetector(Detector):
    watches_hardware = True

    def __init__(self, *, window_s: float, horizon_s: float | None, warmup: int):
        self.window_s, self.horizon_s, self.warmup = window_s, horizon_s, warmup
        self._trends: dict[str, MemoryTrend] = {}
        self._episodes: dict[str, Episode] = {}
        self._calm: dict[str, int] = {}       # judgements in a row without an urgent trend
        self._segment_steps = 0

    def update_hardware(self, sample: HardwareSample) -> list[Anomaly]:
        steps = sample.segment_steps
        if self.horizon_s is None or steps is None:
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
            trend = self._trends[key] = MemoryTrend(self.window_s)
        rate = trend.add(time, used, headroom)
        if rate is None:
            return []
        projected = max(headroom, 0.0) / rate if rate > 0 else float("inf")
        assert self.horizon_s is not None
        # An episode ends only after a whole window of judgements with no urgent trend: one
        # bucket whose quarters do not rise (a collection, a late sample) does not end it.
        urgent = projected < self.horizon_s
        calm = 0 if urgent else self._calm.get(key, 0) + 1
        self._calm[key] = calm
        episode = self._episodes.setdefault(key, Episode())
        if not episode.starts(urgent or (episode.active and calm < BUCKETS)):
            return []
        per_hour = rate * 3600
        return [Anomaly(
            MEMORY_GROWTH, None, projected, self.horizon_s,
            f"memory growing: {what} rose steadily by {per_hour:.3g} {unit}/h over the last "
            f"{fmt.duration(self.window_s)}; at this rate it runs out in "
            f"{fmt.duration(projected)} (memory_growth_horizon_s {self.horizon_s:g})",
            fields={Record.MEMORY: key, Record.PROJECTED_EXHAUSTION_S: projected})]

    def state_dict(self) -> dict[str, Any]:
        return {"episodes": {k: e.active for k, e in self._episodes.items()}}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        for key, active in state.get("episodes", {}).items():
            self._episodes.setdefault(str(key), Episode()).active = bool(active)
