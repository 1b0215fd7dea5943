"""A rank that persistently makes the others wait.

Under data parallelism every rank's step *wall* time is the same: the fast ranks wait for the
slow one inside the gradient all-reduce. What differs is the time a rank spends before it
can start the step (fetching and preparing its batch, host work): the ``data_time_s`` each
rank shares every step. A rank whose median over a window exceeds ``factor`` times the
median of the other ranks, by at least ``min_fraction`` of a step and ``min_seconds``, is a
straggler. Each rank judges only itself, so the anomaly lands in the straggler's own log,
under its own rank.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ..anomaly import STRAGGLER, Anomaly
from .base import Detector, Episode

if TYPE_CHECKING:
    import numpy as np


class StragglerDetector(Detector):
    def __init__(self, *, rank: int, world_size: int, window: int = 20, factor: float = 2.0,
                 min_fraction: float = 0.1, min_seconds: float = 0.005):
        self.rank, self.world_size = rank, world_size
        self.window, self.factor, self.min_fraction = window, factor, min_fraction
        # An absolute floor too: on millisecond steps, scheduling jitter of a loaded host
        # makes one rank's pre-step time twice another's without anyone waiting for long.
        self.min_seconds = min_seconds
        # Every rank's data times (seconds) over the last ``window`` steps, one row per rank:
        # a numpy ring whose column ``_count % window`` is written next, so that a step costs
        # a few array operations at any number of ranks. Made at the first exchange (numpy
        # is imported where used: a single rank never needs it); until then a loaded
        # state's lists wait in ``_loaded``.
        self._ring: Any = None
        self._count = 0                 # steps written into the ring
        self._loaded: list[list[float]] | None = None
        self._episode = Episode()

    def update_peers(self, step: int, data_times: Sequence[float] | np.ndarray,
                     step_time_s: float | None) -> list[Anomaly]:
        """``data_times``: a list, or the exchange's numpy array (read without a copy)."""
        import numpy as np

        values = np.asarray(data_times)             # no copy for the exchange's array
        if values.dtype != np.float32:
            values = values.astype(np.float64)      # float(value) of each
        if values.shape != (self.world_size,):
            raise ValueError(f"{values.size} data times for {self.world_size} ranks")
        ring = self._ring if self._ring is not None else self._make_ring(np, values.dtype)
        if ring.dtype == np.float32 and values.dtype != np.float32:
            # The exchange's float32 times sort twice as fast as float64; any other input
            # widens the ring for good, exactly (every float32 is a float64).
            ring = self._ring = ring.astype(np.float64)
        ring[:, self._count % self.window] = values
        self._count += 1
        if self.world_size < 2 or self._count < self.window:
            return []
        # Each rank's median over its window (the ring's column order does not matter), then
        # the median of the other ranks' medians: the values statistics.median gives.
        ordered = np.sort(ring, axis=1)
        mid = self.window // 2
        middle = ordered[:, mid].astype(np.float64)
        medians = middle if self.window % 2 else (ordered[:, mid - 1] + middle) / 2
        return self.judge(step, float(medians[self.rank]),
                          _median(np, np.delete(medians, self.rank)), step_time_s)

    def judge(self, step: int, mine: float, others: float,
              step_time_s: float | None) -> list[Anomaly]:
        """The rule, given this rank's median data time and the other ranks' (seconds)."""
        margin = max(self.min_fraction * (step_time_s or 0.0), self.min_seconds)
        slow = mine > self.factor * others and mine - others > margin
        if not self._episode.starts(slow):
            return []
        ratio = mine / others if others > 0 else float("inf")
        return [Anomaly(
            STRAGGLER, step, mine, self.factor * others,
            f"rank {self.rank} is a straggler: it spends {mine * 1000:.1f} ms per step "
            f"before each step (its data and host work), {ratio:.3g}x the other ranks' "
            f"{others * 1000:.1f} ms (medians over {self.window} steps); every rank waits "
            f"for it")]

    def _make_ring(self, np: Any, dtype: Any) -> Any:
        """The ring (of ``dtype``: float32 for the exchange's times, float64 for any other),
        holding a loaded state's newest ``window`` times of each rank."""
        loaded, self._loaded = self._loaded, None
        ring = self._ring = np.zeros((self.world_size, self.window), dtype)
        if loaded:
            # each rank's newest values, as many as the shortest list holds (a saved state's
            # lists are all as long); float32 stays only if they are all float32 values
            kept = min(len(times) for times in loaded)
            times = np.array([t[len(t) - kept:] for t in loaded], np.float64)
            times = times.reshape(len(loaded), kept)
            if not np.array_equal(times.astype(ring.dtype), times):
                ring = self._ring = ring.astype(np.float64)
            ring[:, :kept] = times
            self._count = kept
        return ring

    def _times(self) -> list[list[float]]:
        """Each rank's data times, oldest first."""
        if self._ring is None:
            return self._loaded or [[] for _ in range(self.world_size)]
        import numpy as np

        ring, count = self._ring, self._count
        if count < self.window:
            return ring[:, :count].tolist()
        start = count % self.window         # the oldest column
        return np.concatenate((ring[:, start:], ring[:, :start]), axis=1).tolist()

    def state_dict(self) -> dict[str, Any]:
        return {"times": self._times(), **self._episode.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        times = state.get("times", [])
        if len(times) == self.world_size:
            self._loaded = [[float(v) for v in t][-self.window:] for t in times]
            self._ring, self._count = None, 0
        self._episode.load_state_dict(state)


def _median(np: Any, values: Any) -> float:
    """statistics.median of a 1-d float array: the middle value, or the two middle ones'
    mean, computed as it computes it."""
    count = len(values)
    half = count // 2
    if count % 2:
        return float(np.partition(values, half)[half])
    low, high = np.partition(values, (half - 1, half))[half - 1:half + 1].tolist()
    return (low + high) / 2
