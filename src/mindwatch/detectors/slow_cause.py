"""A rank that makes the others wait for its own work: its compute, or a host whose CPU others
took (detectors/straggler.py names the one slow in its input, from data time).

Under data parallelism every rank's step ends at the same collective, so a rank slow in its
compute (a throttled card, extra work in its step) makes every step longer by the same
amount: only what each rank did *before* it entered the collective tells it apart. The
adapter measures that per step (``work_s``; docs/scale.md#slow-ranks-by-cause): PyTorch DDP,
the wall time from the previous step's end to the last gradient bucket's communication hook,
less the data time; MindSpore on the CPU, the process's CPU seconds over the step (the fast
ranks wait in the graph's all-reduce without burning CPU). The host's part comes from the
hardware sampler (``wait_s``: the seconds this process's threads waited for a CPU per second,
summed over its threads, hardware/cpu_share.py).

Each rank keeps only its own windows and shares their medians (one float32 slot each, -1:
unknown) in the ranks' exchange; the judgement reads one median per rank. A rank is slow:

- by its **host** when its median CPU wait is above ``wait_factor`` times the other ranks'
  median and above it by at least ``factor - 1`` seconds per second: its threads spent that
  much more of each step ready to run with no CPU;
- else by its **compute** when its median work is above ``factor`` times the others',
  longer by ``min_seconds``, and further above them than the ranks' own spread allows
  among that many ranks (``_spread``: no healthy rank of 4096 is named by chance).

The first ``warmup`` steps a rank measures stay out of its windows (``trend_warmup``: the
graph's compilation, memory pools, a cold input pipeline; a healthy rank's CPU time per step
was 1.26x the others' over its first 20 steps in one 8-rank job here). Either condition must
hold for ``persist`` steps in a row (a rank's window median on a shared host jumps for a few
steps at a time: 16 ranks on 2 cores, docs/scale.md); then one anomaly per episode,
re-armed once it has cleared. A rank that the data rule names already (``data``) is not
judged again here: its input explains the wait; nor is any rank while another is named slow
by its input or host (``waiting``): the job waits for that one, and the others' CPU time then
grows by the wait (a rank spins a while in the collective before it sleeps: 8 ranks here,
one 90 ms late with its batches, the others' CPU seconds per step went from ~8.5 ms to
~10-11.5 ms, unevenly).
"""
from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING, Any

from ..anomaly import STRAGGLER, Anomaly
from ..records import Anomaly as Record
from .base import Episode

if TYPE_CHECKING:
    import numpy as np

DATA, HOST, COMPUTE = "data", "host", "compute"
CAUSES = (DATA, HOST, COMPUTE)
# the exchanged codes (1 + the index in CAUSES) of the causes that make the others wait
WAITED_FOR = (1, 2)
UNKNOWN = -1.0          # a median slot of a rank that cannot measure it (the SUM keeps it)
# robust deviations beyond the expected largest of the healthy ranks' medians (_spread)
SPREAD_MARGIN = 2.0


class SlowCause:
    def __init__(self, *, rank: int, world_size: int, window: int, factor: float = 1.15,
                 wait_factor: float = 2.0, min_seconds: float = 0.001,
                 persist: int | None = None, warmup: int = 0):
        self.rank, self.world_size, self.window, self.warmup = rank, world_size, window, warmup
        self.factor, self.wait_factor, self.min_seconds = factor, wait_factor, min_seconds
        # a quarter of the window, at least 2: 5 steps at the default window of 20
        self.persist = persist if persist is not None else max(2, window // 4)
        self._work: deque[float] = deque(maxlen=window)     # seconds of own work per step
        self._wait: deque[float] = deque(maxlen=window)     # CPU-wait seconds per second
        self._streak = 0            # steps in a row this rank was slow
        self._episode = Episode()
        self._cause: str | None = None      # the cause of the latest judgement
        self._seen = 0              # steps shared so far (the warm-up's count)

    def share(self, work_s: float | None, wait_s: float | None) -> tuple[float, float]:
        """Before the exchange: this step's figures (None: not measured) into the windows;
        each window's median once it is full, else ``UNKNOWN``."""
        self._seen += 1
        if self._seen <= self.warmup:
            return UNKNOWN, UNKNOWN
        if work_s is not None and work_s >= 0:
            self._work.append(float(work_s))
        if wait_s is not None and wait_s >= 0:
            self._wait.append(float(wait_s))
        return self._median(self._work), self._median(self._wait)

    def _median(self, values: deque[float]) -> float:
        if len(values) < self.window:
            return UNKNOWN
        ordered = sorted(values)
        half = len(ordered) // 2
        return ordered[half] if len(ordered) % 2 else (ordered[half - 1] + ordered[half]) / 2

    def update(self, step: int, work: np.ndarray, waits: np.ndarray, *, data: bool,
               waiting: bool = False, where: str = "") -> list[Anomaly]:
        """``work``, ``waits``: every rank's shared medians (float32, ``UNKNOWN`` where a rank
        has none); ``data``: the data rule names this rank now; ``waiting``: another rank is
        named slow by its input or host; ``where``: " (host h, device d)" for the message."""
        import numpy as np

        cause, mine, others = None, 0.0, 0.0
        if not data and not waiting:
            # within an episode the spread is not asked again: a rank hovering at its edge
            # is one episode, not many
            found = self.judge(np, work, waits, spread=not self._episode.active)
            if found is not None:
                cause, mine, others = found
        self._streak = self._streak + 1 if cause is not None else 0
        self._cause = cause
        if not self._episode.starts(self._streak >= self.persist) or cause is None:
            return []
        return [self._anomaly(step, cause, mine, others, where)]

    @property
    def now(self) -> str | None:
        """The cause this rank is named slow by now: its episode's, while it lasts."""
        return self._cause if self._episode.active else None

    def judge(self, np: Any, work: np.ndarray, waits: np.ndarray, *, spread: bool = True
              ) -> tuple[str, float, float] | None:
        """(cause, this rank's median, the others' median) when this rank is slow now by
        its host or its compute; None otherwise. ``spread``: the compute must stand out of
        the ranks' spread too (``_spread``)."""
        wait = _mine_and_others(np, waits, self.rank)
        if wait is not None:
            mine, others = wait
            # seconds waited per second: at least ``factor - 1`` more is that much of each
            # step spent ready to run, with no CPU
            if mine > self.wait_factor * others and mine - others >= self.factor - 1:
                return HOST, mine, others
        own = _mine_and_others(np, work, self.rank)
        if own is not None:
            mine, others = own
            if mine > self.factor * others and mine - others >= self.min_seconds and \
                    (not spread or mine - others > _spread(np, work, self.rank, others)):
                return COMPUTE, mine, others
        return None

    def _anomaly(self, step: int, cause: str, mine: float, others: float,
                 where: str) -> Anomaly:
        ratio = mine / others if others > 0 else float("inf")
        medians = f"medians over {self.window} steps"
        if cause == HOST:
            text = (f"its threads waited for a CPU {mine:.3g} s per second, {ratio:.3g}x the "
                    f"other ranks' {others:.3g} s ({medians}): other processes on its host "
                    f"take its CPU")
            threshold = self.wait_factor * others
        else:
            text = (f"its own work before the step's collective takes {mine * 1000:.1f} ms "
                    f"per step, {ratio:.3g}x the other ranks' {others * 1000:.1f} ms "
                    f"({medians}): a slower or throttled device, or more work in its step")
            threshold = self.factor * others
        return Anomaly(STRAGGLER, step, mine, threshold,
                       f"rank {self.rank}{where} is a straggler (cause: {cause}): {text}; "
                       f"every rank waits for it", fields={Record.CAUSE: cause})

    def state_dict(self) -> dict[str, Any]:
        """Empty while nothing was measured (a rule fed data times only)."""
        if not (self._seen or self._episode.active):
            return {}
        return {"work": list(self._work), "wait": list(self._wait), "streak": self._streak,
                "cause": self._cause, "seen": self._seen, **self._episode.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._work = deque((float(v) for v in state.get("work", ())), maxlen=self.window)
        self._wait = deque((float(v) for v in state.get("wait", ())), maxlen=self.window)
        self._streak = int(state.get("streak", 0))
        self._seen = int(state.get("seen", 0))
        cause = state.get("cause")
        self._cause = cause if cause in CAUSES else None
        self._episode.load_state_dict(state)


def _spread(np: Any, medians: np.ndarray, rank: int, middle: float) -> float:
    """How far above the others' median a healthy rank's median may stand by chance among
    this many ranks: ``(sqrt(2 ln n) + SPREAD_MARGIN)`` robust standard deviations. The
    largest of n healthy medians lies about sqrt(2 ln n) deviations above their middle (2.0
    at 8 ranks, 4.1 at 4096), so a fixed ratio alone names a healthy rank on a large job; a
    rank 20% slower stands out while the ranks' medians spread by less than ~5% (8 ranks) to
    ~3% (4096). The deviation is read from the faster half (the others' median less their
    lower quartile, / 0.6745): the slow ranks, up to half of them (a whole node of two),
    do not widen it as they would a median absolute deviation. Read only for a rank past
    ``factor`` already (rare), so a step costs it nothing."""
    import math

    others = np.delete(medians.astype(np.float64), rank)
    others = others[others >= 0]
    if len(others) < 2:
        return 0.0
    deviation = (middle - float(np.percentile(others, 25))) / 0.6745
    return (math.sqrt(2 * math.log(len(others) + 1)) + SPREAD_MARGIN) * max(deviation, 0.0)


def _mine_and_others(np: Any, medians: np.ndarray, rank: int) -> tuple[float, float] | None:
    """This rank's median and the median of the other ranks' that are known (float64), or
    None when this rank's or every other's is unknown."""
    mine = float(medians[rank])
    if mine < 0:
        return None
    # the others without a copy of the whole: the last one in this rank's place
    values = medians.astype(np.float64)
    values[rank] = values[-1]
    values = values[:-1]
    known = values[values >= 0]
    if not len(known):
        return None
    return mine, float(np.median(known))
