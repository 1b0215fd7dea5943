"""This process's part of the host's CPU, and whether it had to wait for one.

What tells a run slowed by the host's other processes from one slowed by its own work:

- ``process_cpu_percent``: the CPU this process and its children used since the previous
  sample, in percent of the host's total (``cpu_percent``'s scale: 100 is every core busy),
  so the other processes' part is ``cpu_percent`` less this;
- ``cpu_wait_s``: the seconds this process's threads were ready to run but waited for a CPU
  since the previous sample, summed over its threads (Linux's ``/proc/<pid>/task/*/
  schedstat``; null elsewhere). It stays near zero while the host has a free core, and grows
  when other processes take them: a slowdown from contention shows here, one from the run's
  own work (a slower kernel, a sleep, I/O) does not;
- ``cpu_top``: while the other processes take at least ``TOP_SHARE`` of the host, the
  ``TOP`` of them that took the most since the previous scan, each at least ``TOP_PART`` of
  what they all took: ``{pid, name, cpu_percent}`` (percent of the host), this process's
  own children left out. The sample where a contention starts (or the others' share grows
  by ``TOP_SHARE``) seeds a scan, the next one names them, and then every ``TOP_EVERY_S``
  seconds at most (null in between).

The first sample of each is a baseline (null); ``sample`` never raises.
"""
from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping
from typing import Any

from ..records import Hardware, TopProcess

TOP_SHARE = 10.0      # percent of the host: other processes worth naming take at least this
TOP = 3
TOP_PART = 0.1        # of the other processes' share: the least a named one took
# A scan of every process costs ~50 us each (~75 ms on a host of 1500): once the contention
# has been named, at most this often (s); what it names is then the mean since the last.
TOP_EVERY_S = 20.0
NANOSECONDS = 1e9


class CpuShares:
    def __init__(self, psutil_module: Any, *, pid: int | None = None, proc: str = "/proc",
                 clock: Callable[[], float] = time.monotonic):
        self._psutil = psutil_module
        self._pid = os.getpid() if pid is None else pid
        self._tasks = os.path.join(proc, str(self._pid), "task")
        self._process = psutil_module.Process() if pid is None else psutil_module.Process(pid)
        self._failures = (psutil_module.Error, OSError)
        self._own: float | None = None                 # CPU seconds, this process + children
        self._waits: dict[str, int] = {}               # thread id -> run-queue wait, ns
        self._waited = False                           # the thread waits have a baseline
        # the latest scan of every process: (the host's CPU s, pid -> CPU s), when it was
        # (monotonic s) and the others' share then; whether the next sample scans again (a
        # seed's follow-up, which names what took the CPU since)
        self._scan: tuple[float, dict[int, float]] | None = None
        self._scanned, self._scanned_others, self._follow = 0.0, 0.0, False
        self._clock = clock

    def sample(self, total_s: float | None, host_busy_percent: float | None
               ) -> dict[str, Any]:
        """``total_s``: the host's CPU seconds (all cores) since the previous call, None when
        unknown; ``host_busy_percent``: the host's ``cpu_percent`` over the same time."""
        out: dict[str, Any] = {Hardware.PROCESS_CPU_PERCENT: None, Hardware.CPU_WAIT_S: None,
                               Hardware.CPU_TOP: None}
        own = self._own_seconds()
        if own is not None and self._own is not None and total_s:
            out[Hardware.PROCESS_CPU_PERCENT] = round(
                min(100.0, max(0.0, 100.0 * (own - self._own) / total_s)), 1)
        self._own = own
        out[Hardware.CPU_WAIT_S] = self._wait_seconds()
        share = out[Hardware.PROCESS_CPU_PERCENT]
        others = None if host_busy_percent is None or share is None \
            else host_busy_percent - share
        if others is None or others < TOP_SHARE:
            self._scan = None           # the next contention starts its scans anew
        elif self._follow or (self._scan is not None and
                              self._clock() - self._scanned >= TOP_EVERY_S and
                              others - self._scanned_others < TOP_SHARE):
            # a seed's follow-up names them even if the contention grew since (a fluctuating
            # load would seed again and again, naming no one)
            out[Hardware.CPU_TOP] = self._top(others)
            self._follow = False
        elif self._scan is None or others - self._scanned_others >= TOP_SHARE:
            self._top(others)           # a contention starts, or grows: seed a short scan
            self._follow = True
        return out

    def _family(self) -> list[Any]:
        try:
            return [self._process, *self._process.children(recursive=True)]
        except self._failures:
            return [self._process]

    def _own_seconds(self) -> float | None:
        total, counted = 0.0, False
        for process in self._family():
            try:
                times = process.cpu_times()
            except self._failures:
                continue
            total += times.user + times.system
            counted = True
        return total if counted else None

    def _wait_seconds(self) -> float | None:
        """Run-queue wait of this process's threads since the previous call (seconds)."""
        try:
            tids = os.listdir(self._tasks)
        except OSError:
            return None
        waits = {}
        for tid in tids:
            try:
                with open(os.path.join(self._tasks, tid, "schedstat"), "rb") as handle:
                    waits[tid] = int(handle.read().split()[1])
            except (OSError, IndexError, ValueError):
                continue
        if not waits:
            return None
        before, self._waits = self._waits, waits
        if not self._waited:
            self._waited = True
            return None
        # a thread that ended took its wait with it; a new one waited since it began
        grown = sum(max(wait - before.get(tid, 0), 0) for tid, wait in waits.items())
        return round(grown / NANOSECONDS, 6)

    def _top(self, others_percent: float) -> list[dict[str, Any]] | None:
        family = {process.pid for process in self._family()}
        cpu: dict[int, float] = {}
        names: dict[int, str] = {}
        try:
            processes = list(self._psutil.process_iter(["pid", "name", "cpu_times"]))
        except self._failures:
            return None
        for process in processes:
            info: Mapping[str, Any] = process.info
            times = info.get("cpu_times")
            if info.get("pid") in family or times is None:
                continue
            cpu[info["pid"]] = times.user + times.system
            names[info["pid"]] = info.get("name") or "?"
        total = self._host_seconds()
        previous, self._scan = self._scan, (total, cpu) if total is not None else None
        self._scanned, self._scanned_others = self._clock(), others_percent
        if previous is None or total is None or total <= previous[0]:
            return None
        span, before = total - previous[0], previous[1]
        taken = sorted(((seconds - before[pid], pid) for pid, seconds in cpu.items()
                        if pid in before), reverse=True)[:TOP]
        # those that took a fair part of what the others took: a tenth or more
        least = TOP_PART * others_percent * span / 100.0
        return [{TopProcess.PID: pid, TopProcess.NAME: names[pid],
                 TopProcess.CPU_PERCENT: round(100.0 * seconds / span, 1)}
                for seconds, pid in taken if seconds > 0 and seconds >= least]

    def _host_seconds(self) -> float | None:
        try:
            times = self._psutil.cpu_times()
        except Exception:
            return None
        return sum(times) - getattr(times, "guest", 0) - getattr(times, "guest_nice", 0)
