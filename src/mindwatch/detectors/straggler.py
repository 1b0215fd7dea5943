"""A rank that persistently makes the others wait.

Under data parallelism every rank's step *wall* time is the same: the fast ranks wait for the
slow one inside the gradient all-reduce. What differs is the time a rank spends before it
can start the step (fetching and preparing its batch, host work): the ``data_time_s`` each
rank shares every step. A rank whose median over a window exceeds ``factor`` times the
median of the other ranks, by at least ``min_fraction`` of a step and ``min_seconds``, is a
straggler. Each rank judges only itself, so the anomaly lands in the straggler's own log,
under its own rank.

Each rank keeps only its own window and shares its two middle values (``share``) in the
ranks' exchange, so that the judgement reads one median per rank (``update_peers`` with
``middles``): no rank sorts the others' windows. A caller that hands in only every rank's
data times (a custom exchange, through ``Monitor.observe_peers``) gets the same rule from
every rank's window, kept here.

The rule names a cause (the anomaly's ``cause`` field): this data-time rule's is ``data``;
``cause`` (slow_cause.py) judges, from what each rank did before it entered the step's
collective, the ranks slow by their ``host`` or their ``compute``, which the data time does
not show. ``where`` (" (host h, device d)", set by ranks/peers.py) names the rank's place in
the messages.
"""
from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ..anomaly import STRAGGLER, Anomaly
from ..basics.medians import SAMPLED_FROM, middles, short_row_medians
from ..records import Anomaly as Record
from .base import Detector, Episode
from .slow_cause import CAUSES, DATA, WAITED_FOR, SlowCause

if TYPE_CHECKING:
    import numpy as np


class StragglerDetector(Detector):
    def __init__(self, *, rank: int, world_size: int, window: int = 20, factor: float = 2.0,
                 min_fraction: float = 0.1, min_seconds: float = 0.005,
                 work_factor: float = 1.15, warmup: int = 0):
        self.rank, self.world_size = rank, world_size
        self.window, self.factor, self.min_fraction = window, factor, min_fraction
        # An absolute floor too: on millisecond steps, scheduling jitter of a loaded host
        # makes one rank's pre-step time twice another's without anyone waiting for long.
        self.min_seconds = min_seconds
        # This rank's own data times (seconds) over the last ``window`` steps: float32
        # values when they come through ``share`` (what the exchange carries).
        self._own: deque[float] = deque(maxlen=window)
        # Every rank's data times, for the callers that give no medians: one row per rank,
        # a numpy ring whose column ``_count % window`` is written next, so that a step
        # costs a few array operations at any number of ranks. Made at the first such call
        # (numpy is imported where used: a single rank never needs it); until then a loaded
        # state's lists wait in ``_loaded``.
        self._ring: Any = None
        self._count = 0                 # steps written into the ring
        self._loaded: list[list[float]] | None = None
        self._episode = Episode()
        # the ranks slow by their host or compute; the CPU-wait ratio is this rule's factor
        self.cause = SlowCause(rank=rank, world_size=world_size, window=window,
                               factor=work_factor, wait_factor=factor, warmup=warmup)
        self.where = ""                 # " (host h, device d)" once the places are known

    def share(self, data_time_s: float) -> tuple[float, float]:
        """Before the exchange: this step's data time into this rank's window, and the two
        middle values of the window, sorted (the same one twice for an odd count), for the
        exchange. Two float32 slots, not their mean: the median is their float64 mean, as
        statistics.median computes it, which one float32 slot would round."""
        import numpy as np

        self._own.append(float(np.float32(data_time_s)))   # as the exchange carries it
        self._loaded = None             # the ranks share medians: their lists are not needed
        ordered = sorted(self._own)     # ``window`` values (20 by default): cheap
        half = len(ordered) // 2
        return ordered[half - 1 + len(ordered) % 2], ordered[half]

    @property
    def slow_code(self) -> int:
        """The cause this rank is slow by now, as a number for the exchange: 0 for none, else
        1 + its index in ``slow_cause.CAUSES``."""
        cause = DATA if self._episode.active else self.cause.now
        return 0 if cause is None else 1 + CAUSES.index(cause)

    def update_peers(self, step: int, data_times: Sequence[float] | np.ndarray,
                     step_time_s: float | None, middles: np.ndarray | None = None,
                     work: tuple[np.ndarray, np.ndarray] | None = None,
                     slow: np.ndarray | None = None) -> list[Anomaly]:
        """``middles``: what every rank ``share``d this step, (2, ranks) float32 (then
        ``data_times`` is not read); None: the rule keeps every rank's ``data_times`` (a
        list, or the exchange's numpy array) itself. ``work``: every rank's medians of its
        own work and CPU wait (``cause.share``, exchanged); None: the data rule alone.
        ``slow``: every rank's ``slow_code`` as exchanged (None: unknown)."""
        found = self._update_data(step, data_times, step_time_s, middles)
        if work is not None and self.world_size > 1:
            found += self.cause.update(step, *work, data=self._episode.active,
                                       waiting=self._waited_for(slow), where=self.where)
        return found

    def _waited_for(self, slow: np.ndarray | None) -> bool:
        """Another rank is named slow by its input or host (the job waits for it)."""
        if slow is None:
            return False
        import numpy as np

        waited = np.isin(slow, WAITED_FOR)
        return bool(waited.sum() > waited[self.rank])

    def _update_data(self, step: int, data_times: Sequence[float] | np.ndarray,
                     step_time_s: float | None, middles: np.ndarray | None) -> list[Anomaly]:
        import numpy as np

        if middles is None:
            return self._update_every(np, step, data_times, step_time_s)
        if middles.shape != (2, self.world_size):
            raise ValueError(f"{middles.shape} middle values for {self.world_size} ranks")
        if self.world_size < 2 or len(self._own) < self.window:
            return []
        # Each rank's median: the two middle values' mean in float64 (exact for an odd
        # window, where they are one value), as statistics.median gives it.
        medians = (middles[0].astype(np.float64) + middles[1]) / 2
        mine = float(medians[self.rank])
        # the others' medians without a copy: the last one in this rank's place (their
        # order does not matter)
        medians[self.rank] = medians[-1]
        return self.judge(step, mine, _median(np, medians[:-1]), step_time_s)

    def _update_every(self, np: Any, step: int, data_times: Sequence[float] | np.ndarray,
                      step_time_s: float | None) -> list[Anomaly]:
        """The rule from every rank's data times, kept here in float64 (exact for the
        exchange's float32 values and for a list's floats)."""
        values = np.asarray(data_times, np.float64)
        if values.shape != (self.world_size,):
            raise ValueError(f"{values.size} data times for {self.world_size} ranks")
        ring = self._ring if self._ring is not None else self._make_ring(np)
        ring[:, self._count % self.window] = values
        self._count += 1
        self._own.append(float(values[self.rank]))
        if self.world_size < 2 or self._count < self.window:
            return []
        # Each rank's median over its window (the ring's column order does not matter), then
        # the median of the other ranks' medians: the values statistics.median gives.
        medians = short_row_medians(np, ring)
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
            f"rank {self.rank}{self.where} is a straggler: it spends {mine * 1000:.1f} ms per "
            f"step before each step (its data and host work), {ratio:.3g}x the other ranks' "
            f"{others * 1000:.1f} ms (medians over {self.window} steps); every rank waits "
            f"for it", fields={Record.CAUSE: DATA})]

    def _make_ring(self, np: Any) -> Any:
        """The ring, holding a loaded state's newest ``window`` times of each rank (as many
        as the shortest list holds: a saved state's lists are all as long)."""
        loaded, self._loaded = self._loaded, None
        ring = self._ring = np.zeros((self.world_size, self.window))
        if loaded:
            kept = min(len(times) for times in loaded)
            times = np.array([t[len(t) - kept:] for t in loaded], np.float64)
            ring[:, :kept] = times.reshape(len(loaded), kept)
            self._count = kept
        return ring

    def _times(self) -> list[list[float]]:
        """Each rank's data times, oldest first (the callers that give no medians)."""
        if self._ring is None:
            return self._loaded or []
        import numpy as np

        ring, count = self._ring, self._count
        if count < self.window:
            return ring[:, :count].tolist()
        start = count % self.window         # the oldest column
        return np.concatenate((ring[:, start:], ring[:, :start]), axis=1).tolist()

    def state_dict(self) -> dict[str, Any]:
        """This rank's own window (``own_times``, oldest first); every rank's (``times``)
        too while the rule keeps them (a caller that gives no medians)."""
        state: dict[str, Any] = {"own_times": list(self._own), **self._episode.state_dict()}
        cause = self.cause.state_dict()
        if cause:                       # none until a rank shares its own work
            state["cause"] = cause
        if self._ring is not None or self._loaded is not None:
            state["times"] = self._times()
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """A state of this rule, or of its earlier version (every rank's ``times`` only:
        this rank's own window is its row)."""
        times = state.get("times", [])
        own = state.get("own_times")
        if len(times) == self.world_size:
            self._loaded = [[float(v) for v in t][-self.window:] for t in times]
            self._ring, self._count = None, 0
            if own is None:
                own = self._loaded[self.rank]
        if own is not None:
            self._own = deque((float(v) for v in own), maxlen=self.window)
        self._episode.load_state_dict(state)
        self.cause.load_state_dict(state.get("cause", {}))


def _median(np: Any, values: Any) -> float:
    """statistics.median of a 1-d float array: the middle value, or the two middle ones'
    mean, computed as it computes it. Over many ranks the middle ones are selected among the
    values near a sample's median (basics/medians.py ``middles``: at 16384 ranks ~0.15 ms, CPU
    time on fresh values, where np.partition's branches take ~0.27); where that misses, a
    partition of them all. Either takes a NaN for the largest value."""
    count = len(values)
    half = count // 2
    low = half - 1 + count % 2
    middle = middles(np, values[None, :], low, half)[0] if count >= SAMPLED_FROM else None
    if middle is None:
        middle = np.partition(values, (low, half))[low:half + 1]
    first, last = middle[0].item(), middle[-1].item()
    return first if count % 2 else (first + last) / 2
