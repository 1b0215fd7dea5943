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

from collections import deque
from collections.abc import Sequence
from statistics import median
from typing import Any

from ..anomaly import STRAGGLER, Anomaly
from .base import Detector, Episode


class StragglerDetector(Detector):
    def __init__(self, *, rank: int, world_size: int, window: int = 20, factor: float = 2.0,
                 min_fraction: float = 0.1, min_seconds: float = 0.005):
        self.rank, self.world_size = rank, world_size
        self.window, self.factor, self.min_fraction = window, factor, min_fraction
        # An absolute floor too: on millisecond steps, scheduling jitter of a loaded host
        # makes one rank's pre-step time twice another's without anyone waiting for long.
        self.min_seconds = min_seconds
        self._times: list[deque[float]] = [deque(maxlen=window) for _ in range(world_size)]
        self._episode = Episode()

    def update_peers(self, step: int, data_times: Sequence[float],
                     step_time_s: float | None) -> list[Anomaly]:
        for history, value in zip(self._times, data_times, strict=True):
            history.append(float(value))
        if self.world_size < 2 or len(self._times[self.rank]) < self.window:
            return []
        mine = median(self._times[self.rank])
        others = median(median(h) for r, h in enumerate(self._times) if r != self.rank)
        margin = max(self.min_fraction * (step_time_s or 0.0), self.min_seconds)
        slow = mine > self.factor * others and mine - others > margin
        found = []
        if self._episode.starts(slow):
            ratio = mine / others if others > 0 else float("inf")
            found.append(Anomaly(
                STRAGGLER, step, mine, self.factor * others,
                f"rank {self.rank} is a straggler: it spends {mine * 1000:.1f} ms per step "
                f"before each step (its data and host work), {ratio:.3g}x the other ranks' "
                f"{others * 1000:.1f} ms (medians over {self.window} steps); every rank waits "
                f"for it"))
        return found

    def state_dict(self) -> dict[str, Any]:
        return {"times": [list(h) for h in self._times], **self._episode.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        times = state.get("times", [])
        if len(times) == self.world_size:
            self._times = [deque(t, maxlen=self.window) for t in times]
        self._episode.load_state_dict(state)
