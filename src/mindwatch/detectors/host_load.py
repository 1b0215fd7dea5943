"""The host's CPU as ``throughput_drop`` reads it: did other processes take it from this run?

Fed every hardware sample (the sampler thread) and asked by the training thread, so it
keeps its samples behind a lock. For a span of time it answers with a ``Load``: the share of
the host's CPU the other processes took (``cpu_percent`` less ``process_cpu_percent``), how
busy the host was, how long this process's threads waited for a CPU per second (summed over
its threads: ``cpu_wait_s``), and the other processes that took the most (``cpu_top``).

Contention explains a slowdown (``explains``) when this process's threads waited longer for a
CPU, per step, by at least ``SHARE`` of what the step grew, while the other processes took
more of the host. Work of the run's own (a slower kernel, a sleep, I/O, a collective's wait)
is no wait for a CPU; the run's own threads crowding each other (more input workers) leave
the other processes' share as it was.
"""
from __future__ import annotations

import threading
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..basics import format as fmt
from ..observation import HardwareSample
from ..records import TopProcess
from .base import is_finite

SHARE = 0.5           # of the step's growth that more waiting for a CPU must account for
MIN_RISE = 1.0        # percent of the host: the other processes' share must rise by this
KEPT = 3600           # samples (2 h at the default 2 s): the spans asked about are recent
WAIT_S = 10.0         # the least time a drop waits for a sample that covers its slow steps


@dataclass(frozen=True)
class Load:
    others_percent: float       # the other processes' part of the host's CPU, mean
    busy_percent: float         # the host's CPU load, mean
    waiting: float              # seconds this process's threads waited for a CPU, per second
    top: Sequence[Any]          # the latest ``cpu_top`` of the span (TopProcess entries)

    def wait_per_step(self, step_s: float) -> float:
        return self.waiting * step_s


class HostLoad:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        # (start, end, wait s, busy %, others %, top): each sample covers (start, end]
        self._samples: deque[tuple[float, float, float | None, float, float, Any]] = \
            deque(maxlen=KEPT)
        self._last: float | None = None

    def add(self, sample: HardwareSample) -> None:
        busy, own = sample.cpu_percent, sample.process_cpu_percent
        last, self._last = self._last, sample.time
        if last is None or not is_finite(busy) or not is_finite(own) or sample.time <= last:
            return
        wait = sample.cpu_wait_s if is_finite(sample.cpu_wait_s) else None
        with self._lock:
            self._samples.append((last, sample.time, wait, busy, max(busy - own, 0.0),
                                  sample.cpu_top or ()))

    def covers(self, start: float) -> bool:
        """Whether a sample has come whose whole interval is after ``start``, or none will
        (none with this process's CPU has come: no sampler, or one that cannot read it)."""
        with self._lock:
            return not self._samples or self._samples[-1][0] >= start

    def deadline(self, now: float) -> float:
        """How long to wait, from ``now``, for a sample to cover what just happened: three of
        the longest intervals lately (at least ``WAIT_S``)."""
        with self._lock:
            longest = max((s[1] - s[0] for s in list(self._samples)[-10:]), default=0.0)
        return now + max(3 * longest, WAIT_S)

    def since(self, start: float, end: float) -> Load | None:
        """The load over the samples whose whole interval lies after ``start`` (up to
        ``end``), else over those that cover part of it."""
        with self._lock:
            after = [s for s in reversed(self._samples) if s[0] >= start and s[0] < end]
        return self._load(after) if after else self.over(start, end)

    def over(self, start: float, end: float, *, latest: bool = True) -> Load | None:
        """The load over the samples that cover part of [start, end] (with ``latest``, the
        latest one when none does yet: the sampler has not come round since); None without
        samples."""
        samples = []
        with self._lock:
            for sample in reversed(self._samples):         # the spans asked about are recent
                if sample[1] <= start:
                    break
                if sample[0] < end:
                    samples.append(sample)
            if not samples and self._samples and latest:
                samples = [self._samples[-1]]
        return self._load(samples) if samples else None

    @staticmethod
    def _load(samples: list[Any]) -> Load:
        """Of samples in reverse time order."""
        waits = [(s[1] - s[0], s[2]) for s in samples if s[2] is not None]
        seconds = sum(span for span, _ in waits)
        top = next((s[5] for s in samples if s[5]), ())        # the latest first
        return Load(others_percent=sum(s[4] for s in samples) / len(samples),
                    busy_percent=sum(s[3] for s in samples) / len(samples),
                    waiting=sum(wait for _, wait in waits) / seconds if seconds else 0.0,
                    top=top)


def explains(then: Load | None, now: Load | None, step_then: float, step_now: float
             ) -> bool:
    """Whether contention for the host's CPU explains the step growing from ``step_then`` to
    ``step_now`` seconds (``then``: the load at the baseline, ``now``: over the slow steps)."""
    if then is None or now is None or step_now <= step_then:
        return False
    waited = now.wait_per_step(step_now) - then.wait_per_step(step_then)
    return (waited >= SHARE * (step_now - step_then)
            and now.others_percent - then.others_percent >= MIN_RISE)


def describe(then: Load, now: Load, step_then: float, step_now: float) -> str:
    """What took the CPU, for the anomaly's message."""
    named = ", ".join(f"pid {p.get(TopProcess.PID)} {p.get(TopProcess.NAME)} "
                      f"{p.get(TopProcess.CPU_PERCENT)}%" for p in now.top
                      if isinstance(p, dict))
    return (f"other processes took the host's CPU: their share rose from "
            f"{then.others_percent:.0f}% to {now.others_percent:.0f}% of it (the host "
            f"{now.busy_percent:.0f}% busy{'; the most: ' + named if named else ''}), and "
            f"this process's threads, between them, waited "
            f"{fmt.duration(now.wait_per_step(step_now))} per step for a CPU "
            f"({fmt.duration(then.wait_per_step(step_then))} before)")
