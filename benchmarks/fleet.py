"""The ranks' per-step host cost at fleet sizes (issue #43): N ranks simulated in one process,
today's code against the loops it replaced (kept here only, as ``Old*``, to compare with and
for the equivalence tests: tests/core/test_fleet.py).

The framework's all-reduce is replaced by a pre-summed vector (what N ranks' vectors sum to,
built once per step of the simulation), so only the host side is measured: the whole step
end over the ranks as rank 0 pays it, step after step of a long run:

- its job row (job/fields.py ``row``, with the step's observation fed to the pace),
- the exchange's decoding (ranks/consensus.py),
- the straggler rule and the stop scan (``Peers.findings``, detectors/straggler.py; today's
  rule with its ``share`` of this rank's window before the exchange, reading the ranks'
  exchanged medians after it; the old one sorting every rank's window),
- the peer readers (throughput_drop's and data_bound's pace, detectors/pace.py),
- the job log's aggregation (job/job.py, job_log.py, fields.py ``reduce``/``kinds_of``,
  rank_bins.py), written to a real file: bins of 100 steps, so a bin's flush every 100
  steps counts, amortised (the flush alone is printed too, and the total with the 1000-step
  bins of a run past step 10,000). The old path runs the job log's first version
  (``old_job_log``: its aggregation swapped in).

The step end's parts are timed in this thread's CPU time (a shared host's other processes
would count in wall time). Goal: the per-step total at most 1 ms up to 4096 ranks and 3 ms
at 16384. Then ``places`` (once per segment; goal 0.2 s at 16384 ranks, wall time) and the
memory the straggler's window holds (tracemalloc, once full).

    python benchmarks/fleet.py [N ...]          # default: 8 512 4096 16384
"""
from __future__ import annotations

import contextlib
import os
import socket
import statistics
import sys
import tempfile
import time
import tracemalloc
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from typing import Any, cast

import numpy as np

from mindwatch.anomaly import ANOMALY_KINDS, USER_STOP, Anomaly
from mindwatch.basics import format as fmt
from mindwatch.basics.clock import SystemClock
from mindwatch.basics.rank_set import rank_set
from mindwatch.detectors.base import Detector, is_finite
from mindwatch.detectors.data_bound import DataBoundDetector
from mindwatch.detectors.pace import Pace, Slow, _median
from mindwatch.detectors.straggler import StragglerDetector
from mindwatch.detectors.throughput_drop import (
    COMPUTE,
    DATA,
    NAMING_SHARE,
    ThroughputDropDetector,
    Window,
)
from mindwatch.job import fields as job_fields
from mindwatch.job import job_log
from mindwatch.job.fields import short
from mindwatch.job.job import Job
from mindwatch.job.rank_bins import RankBins
from mindwatch.job_schema import JobRanks, JobStep, Spread, bin_steps
from mindwatch.observation import StepObservation
from mindwatch.policy import Policy
from mindwatch.ranks.consensus import _HOST_BYTES, _LOW, _SLOTS, Exchange, RankConsensus
from mindwatch.ranks.peers import Peers, stop_code, stop_reason
from mindwatch.recovery.rewinding import RewindWish

SIZES = (8, 512, 4096, 16384)
WINDOW, FACTOR = 20, 2.0
HOSTS_OF = 8                    # ranks per host


# ---- the replaced code, as it was (one loop over the ranks per step) ----------------------

class OldRankConsensus(RankConsensus):
    def exchange(self, step: int, stop: int,  # type: ignore[override]
                 data_time_s: float, wish: RewindWish | None, touched: bool,
                 job_row: np.ndarray | None = None) -> Exchange:
        n, width = self.world_size, 0 if job_row is None else len(job_row)
        total = self._reduce(self._slots(step, stop, data_time_s, wish, touched, width))
        wishes = []
        for rank in range(n):
            back, kind = round(total[2 * n + rank]), stop_reason(round(total[3 * n + rank]))
            if back > 0 and kind is not None:
                wishes.append(RewindWish(onset=step - back + 1, kind=kind, rank=rank))
        # lists, as the old Exchange held them
        return Exchange(stop_codes=[round(v) for v in total[:n]],
                        data_times=[float(v) for v in total[n:2 * n]],
                        rewind_wishes=wishes, touched=bool(total[4 * n:5 * n].sum() > 0),
                        job_rows=None if job_row is None
                        else total[_SLOTS * n:].reshape(n, width))

    def places(self, host: str, device: int | None
               ) -> dict[int, tuple[str | None, int | None]]:
        n, width = self.world_size, _HOST_BYTES + 1
        total = self._reduce(self._place_slots(host, device))
        found: dict[int, tuple[str | None, int | None]] = {}
        for rank in range(n):
            row = total[rank * width:(rank + 1) * width]
            text = bytes(int(b) for b in row[:_HOST_BYTES] if b > 0).decode("utf-8", "replace")
            found[rank] = (text, None if row[-1] < 0 else int(row[-1]))
        return found


class OldStraggler(StragglerDetector):
    def __init__(self, *, rank: int, world_size: int, window: int = 20, factor: float = 2.0,
                 min_fraction: float = 0.1, min_seconds: float = 0.005):
        super().__init__(rank=rank, world_size=world_size, window=window, factor=factor,
                         min_fraction=min_fraction, min_seconds=min_seconds)
        self._old: list[deque[float]] = [deque(maxlen=window) for _ in range(world_size)]

    def update_peers(self, step: int, data_times: Sequence[float],  # type: ignore[override]
                     step_time_s: float | None, middles: None = None) -> list[Anomaly]:
        for history, value in zip(self._old, data_times, strict=True):
            history.append(float(value))
        if self.world_size < 2 or len(self._old[self.rank]) < self.window:
            return []
        mine = statistics.median(self._old[self.rank])
        others = statistics.median(statistics.median(h) for r, h in enumerate(self._old)
                                   if r != self.rank)
        return self.judge(step, mine, others, step_time_s)

    def state_dict(self) -> dict[str, Any]:
        return {"times": [list(h) for h in self._old], **self._episode.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        times = state.get("times", [])
        if len(times) == self.world_size:
            self._old = [deque(t, maxlen=self.window) for t in times]
        self._episode.load_state_dict(state)


class OldPeers(Peers):
    def __init__(self, **kwargs: Any):
        super().__init__(**kwargs)
        self.straggler = OldStraggler(rank=self.rank, world_size=self.world_size,
                                      window=kwargs["straggler_window"],
                                      factor=kwargs["straggler_factor"])

    def findings(self, *, step: int, stop_codes: Sequence[int],  # type: ignore[override]
                 data_times: Sequence[float], step_time_s: float | None, stopping: bool,
                 middles: None = None) -> list[Anomaly]:
        found = [anomaly for listener in [self.straggler, *self._detectors]
                 for anomaly in listener.update_peers(step, data_times, step_time_s)]
        if stopping:
            return found
        for peer, code in enumerate(stop_codes):
            reason = stop_reason(code)
            if peer == self.rank or reason is None:
                continue
            found.append(self.peer_stop(step, peer, reason))
            break
        return found


class OldPace(Pace):
    """The pace with every rank's data times as they were kept: a deque per rank, appended
    in a Python loop each step, fed the list ``Peers`` made of the exchange's array."""

    def __init__(self, *, window: int, warmup: int, samples: bool = True):
        super().__init__(window=window, warmup=warmup, samples=samples)
        self._old: list[deque[float]] = []

    def add(self, obs: StepObservation) -> None:
        if obs is not self._seen and obs.segment_step == 1:
            self._old = []
        super().add(obs)

    @property
    def has_peers(self) -> bool:
        return bool(self._old)

    def add_peers(self, data_times: Sequence[float] | np.ndarray) -> None:
        times = data_times.tolist() if isinstance(data_times, np.ndarray) else data_times
        if len(self._old) != len(times):
            self._old = [deque(maxlen=self.window) for _ in times]
        if not self._counted_last:
            return
        for history, value in zip(self._old, times, strict=True):
            history.append(float(value) if is_finite(value) and value >= 0 else 0.0)

    def slow_steps(self, limit: float) -> Slow | None:
        slow = [i for i, step_s in enumerate(self._steps) if step_s > limit]
        if not slow:
            return None
        peers = None
        if len(self._old) >= 2 and all(len(h) == len(self._steps) for h in self._old):
            peers = [_median(h[i] for i in slow) for h in self._old]
        return Slow(_median(self._steps[i] for i in slow),
                    _median(self._data[i] for i in slow), peers,  # type: ignore[arg-type]
                    min(self._times[i] - self._steps[i] for i in slow),
                    max(self._times[i] for i in slow))

    def peer_data_s(self) -> list[float] | None:  # type: ignore[override]
        if len(self._old) < 2 or any(len(h) < self.window for h in self._old):
            return None
        return [_median(h) for h in self._old]


class OldThroughputDrop(ThroughputDropDetector):
    """throughput_drop naming the ranks from the lists of ``OldPace``, as it did."""

    def _own_cause(self, best: Window, step_now: float, data_now: float,
                   peers_now: Any) -> tuple[str, list[int], str]:
        grown = max(step_now - best.step_s, 0.0)
        data_then, peers_then = best.data_s, best.peers
        if peers_then is not None and peers_now is not None \
                and len(peers_then) == len(peers_now):
            growth = [now - then for now, then in zip(peers_now, peers_then, strict=True)]
            ranks = [r for r, g in enumerate(growth) if g > 0 and g >= NAMING_SHARE * grown]
            if ranks:
                said = ", ".join(f"rank {r} {fmt.duration(peers_then[r])} -> "
                                 f"{fmt.duration(peers_now[r])}" for r in ranks)
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


# The job log's aggregation as this first version had it (job/fields.py, job/rank_bins.py):
# each field's passes over the rows' strided columns, np.median, and short() per value of a
# bin's flush. The benchmark swaps them in (``old_job_log``) for its "start" figure.

def old_known_mask(rows: np.ndarray) -> np.ndarray:
    bits = rows[:, job_fields.KNOWN].astype(np.int64)
    return (bits[:, None] >> np.arange(len(job_fields.JOB_FIELDS))) & 1 == 1


def old_kinds_of(rows: np.ndarray, slot: int = job_fields.KINDS) -> dict[str, np.ndarray]:
    bits = rows[:, slot].astype(np.int64)
    if not bits.any():
        return {}
    union = int(np.bitwise_or.reduce(bits))
    return {kind: np.flatnonzero(bits >> index & 1)
            for index, kind in enumerate(ANOMALY_KINDS) if union >> index & 1}


def old_reduce(rows: np.ndarray) -> dict[str, Any]:
    known = old_known_mask(rows)
    record: dict[str, Any] = {}
    for index, field in enumerate(job_fields.JOB_FIELDS):
        column, mask = rows[:, index], known[:, index]
        if not mask.any():
            record[field.name] = None
        elif field.reduce == job_fields.SPREAD:
            record[field.name] = _old_spread(column, mask)
        else:
            values = column[mask].astype(np.float64)
            record[field.name] = short(values.mean() if field.reduce == job_fields.MEAN
                                       else values.max())
    touched = np.flatnonzero(rows[:, job_fields.KINDS])
    record[JobStep.SKIPPED] = bool(rows[:, job_fields.SKIPPED].any())
    record[JobStep.RANKS] = rank_set(touched.tolist()) if len(touched) else None
    return record


def _old_spread(column: np.ndarray, mask: np.ndarray) -> dict[str, Any] | None:
    finite = mask & np.isfinite(column)
    spread: dict[str, Any]
    if finite.any():
        low = int(np.where(finite, column, np.inf).argmin())
        high = int(np.where(finite, column, -np.inf).argmax())
        spread = {Spread.MIN: short(column[low]), Spread.MIN_RANK: low,
                  Spread.MEDIAN: short(np.median(column[finite])),
                  Spread.MAX: short(column[high]), Spread.MAX_RANK: high}
    else:
        spread = dict.fromkeys(Spread.REQUIRED)
    bad = np.flatnonzero(mask & ~finite)
    if len(bad):
        spread[Spread.NONFINITE_RANKS] = rank_set(bad.tolist())
    return spread


class OldRankBins(RankBins):
    """(ranks, binned fields) sums, a where per field over strided columns."""

    def add(self, step: int, rows: np.ndarray) -> dict[str, Any] | None:
        binned = [(i, f) for i, f in enumerate(job_fields.JOB_FIELDS) if f.bin]
        columns = [index for index, _ in binned]
        values = rows[:, columns].astype(np.float64)
        known = old_known_mask(rows)[:, columns]
        if self._sums is None or self._sums.shape != values.shape:
            self._sums = np.zeros(values.shape)
            self._counts = np.zeros(values.shape, np.int64)
            self._from = None
        assert self._counts is not None
        if self._from is None:
            span = bin_steps(step)
            self._from, self._end = step, -(-step // span) * span
            self._sums[:] = np.where([f.bin == job_fields.MAX for _, f in binned], -np.inf, 0.0)
            self._counts[:] = 0
        for slot, (_, field) in enumerate(binned):
            here, mask = values[:, slot], known[:, slot]
            if field.bin == job_fields.MEAN:
                self._sums[:, slot] += np.where(mask, here, 0.0)
            else:
                self._sums[:, slot] = np.where(mask, np.maximum(self._sums[:, slot], here),
                                               self._sums[:, slot])
        self._counts += known
        return None if step < self._end else self.flush(step)

    def flush(self, step: int) -> dict[str, Any] | None:
        if self._from is None or self._sums is None or self._counts is None:
            return None
        record: dict[str, Any] = {JobRanks.STEP_FROM: self._from, JobRanks.STEP: step}
        binned = [f for f in job_fields.JOB_FIELDS if f.bin]
        for slot, field in enumerate(binned):
            counts = self._counts[:, slot]
            values = self._sums[:, slot] / np.maximum(counts, 1) \
                if field.bin == job_fields.MEAN else self._sums[:, slot]
            record[field.name] = [short(v) if n else None for v, n in
                                  zip(values.tolist(), counts.tolist(), strict=True)]
        self._from = None
        return record


@contextlib.contextmanager
def old_job_log() -> Iterator[None]:
    """The job log (job/job.py, job_log.py unchanged) on the old aggregation, while open."""
    kept = job_fields.reduce, job_fields.known_mask, job_fields.kinds_of, job_log.RankBins
    job_fields.reduce, job_fields.known_mask = old_reduce, old_known_mask
    job_fields.kinds_of = old_kinds_of      # late_kinds_of's too
    job_log.RankBins = OldRankBins          # type: ignore[misc]
    try:
        yield
    finally:
        job_fields.reduce, job_fields.known_mask, job_fields.kinds_of = kept[:3]
        job_log.RankBins = kept[3]          # type: ignore[misc]


# ---- the simulated fleet ---------------------------------------------------------------

GOALS_MS = ((4096, 1.0), (16384, 3.0))      # (up to this many ranks, the step end's goal)
PLACES_GOAL_S = 0.2                          # at 16384 ranks
BIN = 100                                    # the job log's bin span from step 101 on
LATER_BIN = 1000                             # and from step 10,001 on
JOB_STEP_S = 0.5                             # the simulated step time, s


def step_totals(n: int, steps: int, seed: int = 0, slow_rank: int | None = None,
                job: bool = False) -> list[np.ndarray]:
    """What ``steps`` exchanges of n ranks sum to: random data times (one rank slow, when
    given, from the middle on) and the middle values of each rank's window of them, a few
    rewind wishes and a stop late; with ``job``, every rank's job row after them
    (``job_rows``)."""
    rng = np.random.default_rng(seed)
    totals = []
    history: deque[np.ndarray] = deque(maxlen=WINDOW)
    for step in range(1, steps + 1):
        total = np.zeros(_SLOTS * n, np.float32)
        total[n:2 * n] = rng.uniform(0.001, 0.02, n)
        if slow_rank is not None and step > steps // 2:
            total[n + slow_rank] = 0.2
        # what each rank's StragglerDetector.share gives: its window's two middle values
        history.append(total[n:2 * n].copy())
        ordered = np.sort(np.stack(history, axis=1), axis=1)
        half = len(history) // 2
        total[_LOW * n:(_LOW + 2) * n] = ordered[:, [half - 1 + len(history) % 2, half]].T.ravel()
        wishers = rng.choice(n, size=min(n, 2), replace=False)
        total[2 * n + wishers] = rng.integers(1, 4, len(wishers))
        total[3 * n + wishers] = stop_code("loss_spike")
        total[4 * n + wishers] = 1
        if step == steps:
            total[n - 1] = stop_code(USER_STOP)
        if job:
            rows = job_rows(rng, total[n:2 * n], wishers)
            total = np.concatenate((total, rows.reshape(-1)))
        totals.append(total)
    return totals


def job_rows(rng: np.random.Generator, data_times: np.ndarray, found: np.ndarray
             ) -> np.ndarray:
    """Every rank's row of the job log as the ranks fill them in (job/fields.py): a loss and
    step time of their own, the reduced gradient norm (one value), their data time, local
    norm and memory, every field known; the ranks ``found`` found a loss spike."""
    n, names = len(data_times), job_fields.NAMES
    rows = np.zeros((n, job_fields.WIDTH), np.float32)
    rows[:, names.index("loss")] = rng.normal(2.0, 0.05, n)
    rows[:, names.index("grad_norm")] = 1.3
    rows[:, names.index("step_time_s")] = JOB_STEP_S + rng.uniform(0, 0.002, n)
    rows[:, names.index("data_time_s")] = data_times
    rows[:, names.index("local_grad_norm")] = rng.uniform(1.0, 2.0, n)
    rows[:, names.index("memory_mb")] = 60000 + rng.uniform(0, 100, n)
    rows[:, job_fields.KNOWN] = 2 ** len(names) - 1
    rows[found, job_fields.KINDS] = 1 << ANOMALY_KINDS.index("loss_spike")
    return rows


def place_totals(n: int) -> np.ndarray:
    """Every rank's host (HOSTS_OF ranks each) and device, summed."""
    width = _HOST_BYTES + 1
    total = np.zeros((n, width), np.float32)
    for rank in range(n):
        name = f"node-{rank // HOSTS_OF:05d}.cluster.example".encode()
        total[rank, :len(name)] = np.frombuffer(name, np.uint8)
        total[rank, -1] = rank % HOSTS_OF
    return total.reshape(-1)


class Replay:
    """A reduce_sum that returns the next pre-summed vector: the host side alone."""

    def __init__(self, totals: Sequence[np.ndarray]):
        self.totals, self.at = list(totals), 0

    def __call__(self, vector: np.ndarray) -> np.ndarray:
        total = self.totals[self.at % len(self.totals)]
        self.at += 1
        return total


def peers_of(kind: type[Peers], n: int, rank: int = 0,
             detectors: Sequence[Detector] = ()) -> Peers:
    return kind(rank=rank, world_size=n, policy=Policy({}), straggler_window=WINDOW,
                straggler_factor=FACTOR, detectors=detectors)


def per_call_ms(call: Callable[[], Any], count: int) -> float:
    best = float("inf")
    for _ in range(3):              # the best of three runs: the host is shared
        start = time.perf_counter()
        for _ in range(count):
            call()
        best = min(best, (time.perf_counter() - start) / count)
    return best * 1000


PARTS = ("row", "exchange", "straggler", "readers", "job")


class RankZero:
    """Rank 0's step end over n simulated ranks, today's or the old one (``old``: the old
    exchange, straggler and pace; no job row, no job log)."""

    def __init__(self, n: int, old: bool, log_dir: str | None = None):
        self.n, self.old = n, old
        self.consensus = (OldRankConsensus if old else RankConsensus)(
            0, n, Replay(step_totals(n, WINDOW + 5, job=True)))
        pace = (OldPace if old else Pace)(window=WINDOW, warmup=0)
        self.readers = [(OldThroughputDrop if old else ThroughputDropDetector)(
            pace, factor=1.5, baseline=None), DataBoundDetector(pace, share=0.5)]
        # the straggler and the stop scan; the readers are timed on their own below, fed
        # what Peers.findings feeds them
        self.peers = peers_of(OldPeers if old else Peers, n)
        self.job: Job | None = None
        if log_dir is not None:
            self.job = Job(rank=0, world_size=n, log_dir=log_dir, device=0,
                           log_path=os.path.join(log_dir, "rank0.jsonl"), clock=SystemClock(),
                           resume=False, notice=print)
            self.job.begin({r: (f"node-{r // HOSTS_OF}", r % HOSTS_OF) for r in range(n)}, n)

    def run(self, first: int, last: int) -> tuple[dict[str, float], float]:
        """Steps ``first`` to ``last`` (one that closes a bin, a multiple of BIN): each part's
        seconds per step, the job log's with the bin's flush spread over BIN steps; and the
        flush's step's job log seconds."""
        spent, flush = dict.fromkeys(PARTS, 0.0), 0.0
        clock = time.thread_time     # CPU time: the host is shared, wall time counts the others
        for step in range(first, last + 1):
            t0 = clock()
            obs = StepObservation(step=step, step_time_s=JOB_STEP_S, data_time_s=0.01,
                                  segment_step=step, time=step * JOB_STEP_S, loss=2.0)
            found = [a for reader in self.readers for a in reader.update(obs)]
            row = job_fields.row({"loss": 2.0, "grad_norm": 1.3, "step_time_s": JOB_STEP_S,
                                  "data_time_s": 0.01, "local_grad_norm": 1.5}, 60000.0,
                                 (a.kind for a in found))
            t1 = shared_at = clock()
            if self.old:
                shared = self.consensus.exchange(step, 0, 0.01, None, False, row)
            else:               # this rank's window's middle values travel in the exchange
                middle = self.peers.straggler.share(0.01)
                shared_at = clock()
                shared = self.consensus.exchange(step, 0, 0.01, None, False, row, middle)
            share, t1 = shared_at - t1, shared_at          # the share counts as straggler's
            t2 = clock()
            after = self.peers.findings(step=step, stop_codes=shared.stop_codes,
                                        data_times=shared.data_times,
                                        step_time_s=JOB_STEP_S, stopping=False,
                                        **({} if self.old else {"middles": shared.middles}))
            t3 = clock() + share
            times = cast("Sequence[float]", shared.data_times)     # as Peers hands it on
            after += [a for reader in self.readers
                      for a in reader.update_peers(step, times, JOB_STEP_S)]
            t4 = clock()
            if self.job is not None:
                self.job.step(step, shared.job_rows, found, after)
            t5 = clock()
            for part, seconds in zip(PARTS[:-1], (t1 - t0, t2 - t1, t3 - t2, t4 - t3),
                                     strict=True):
                spent[part] += seconds
            if step % BIN:
                spent["job"] += t5 - t4
            else:
                flush = t5 - t4
        steps = last - first + 1
        figures = {part: seconds / steps for part, seconds in spent.items()}
        # the bin's other steps as these went, and its flush once per BIN steps
        figures["job"] = spent["job"] / max(steps - 1, 1) * (BIN - 1) / BIN + flush / BIN
        return figures, flush


def step_end_ms(n: int, old: bool) -> dict[str, float]:
    """Each part's ms per step over the best of three runs (by their total), each ending at
    a step that closes a bin, after 100 steps of warm-up; runs as long as the old loops
    allow (100 steps at most)."""
    with tempfile.TemporaryDirectory() as log_dir, \
            old_job_log() if old else contextlib.nullcontext():
        zero = RankZero(n, old, log_dir)
        steps = max(3, min(BIN, 20000 // n)) if old else BIN
        zero.run(1, BIN)                    # the windows full, and bins of 100 from here
        best: dict[str, float] | None = None
        flushes: list[float] = []
        for end in range(2 * BIN, 5 * BIN, BIN):
            seconds, flush = zero.run(end - steps + 1, end)
            figures = {part: value * 1000 for part, value in seconds.items()}
            figures["total"] = sum(figures.values())
            flushes.append(flush * 1000)
            if best is None or figures["total"] < best["total"]:
                best = figures
        assert best is not None and zero.job is not None
        best["flush"] = min(flushes)
        zero.job.end({})
    return best


def measure(n: int) -> dict[str, float]:
    figures: dict[str, float] = {}
    for label, old in (("old", True), ("new", False)):
        for part, ms in step_end_ms(n, old).items():
            figures[f"{part}_{label}"] = ms
        kind = OldRankConsensus if old else RankConsensus
        placing = kind(0, n, Replay([place_totals(n)]))
        figures[f"places_{label}"] = per_call_ms(
            lambda c=placing: c.places(socket.gethostname(), 0), 1) / 1000
        consensus = kind(0, n, Replay(step_totals(n, WINDOW)))
        shared = [consensus.exchange(i, 0, 0.01, None, False) if old else
                  consensus.exchange(i, 0, 0.01, None, False, None, (0.01, 0.01))
                  for i in range(1, WINDOW + 1)]
        figures[f"memory_{label}"] = straggler_bytes(OldPeers if old else Peers, n, shared)
    return figures


def straggler_bytes(kind: type[Peers], n: int, shared: Sequence[Exchange]) -> float:
    """Bytes the straggler's window holds once full (tracemalloc)."""
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    peers = peers_of(kind, n)
    for i, one in enumerate(shared[:WINDOW]):
        if one.middles is None:          # the old rule: every rank's times
            peers.straggler.update_peers(i + 1, one.data_times, 0.1)
        else:
            peers.straggler.share(0.01)
            peers.straggler.update_peers(i + 1, one.data_times, 0.1, one.middles)
    held = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    return held


def goal_ms(n: int) -> float:
    return next((goal for most, goal in GOALS_MS if n <= most), GOALS_MS[-1][1])


def main(sizes: Sequence[int]) -> None:
    print(f"Rank 0's step end, CPU ms per step: old (the per-rank loops before issue #43, and "
          f"the job log's first version) | new. Job log: a bin's flush spread over its {BIN} "
          "steps; flush: that one step's job log.")
    print(f"{'ranks':>6} | {'exchange':>13} | {'straggler':>13} | {'peer readers':>13} | "
          f"{'row':>5} | {'job log':>13} | {'flush':>11} | {'total':>13} | goal")
    for n in sizes:
        f = measure(n)
        goal = goal_ms(n)
        print(f"{n:>6} | {_pairs(f, ('exchange', 'straggler', 'readers'))} | "
              f"{f['row_new']:>5.3f} | {_pairs(f, ('job',))} | "
              f"{f['flush_old']:>5.1f} {f['flush_new']:>5.1f} | {_pairs(f, ('total',))} | "
              f"{goal:g} {'ok' if f['total_new'] <= goal else 'OVER'}", flush=True)
        places = f"places s {f['places_old']:.3f} -> {f['places_new']:.3f}"
        if n >= 16384:
            places += (f" ({'ok' if f['places_new'] <= PLACES_GOAL_S else 'OVER'} against "
                       f"{PLACES_GOAL_S:g} s)")
        # past step 10,000 a bin spans 1000 steps: its flush weighs a tenth as much
        later = {label: f[f"total_{label}"] - f[f"flush_{label}"] * (1 / BIN - 1 / LATER_BIN)
                 for label in ("old", "new")}
        print(f"{'':>6}   total with {LATER_BIN}-step bins {later['old']:.3f} -> "
              f"{later['new']:.3f} ms; {places}; straggler window MiB "
              f"{f['memory_old'] / 2 ** 20:.2f} -> {f['memory_new'] / 2 ** 20:.2f}", flush=True)


def _pairs(figures: dict[str, float], parts: Sequence[str]) -> str:
    return " | ".join(f"{figures[f'{part}_old']:>6.3f} {figures[f'{part}_new']:>6.3f}"
                      for part in parts)


if __name__ == "__main__":
    main([int(arg) for arg in sys.argv[1:]] or SIZES)
