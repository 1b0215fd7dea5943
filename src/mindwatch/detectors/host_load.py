"""The host as ``throughput_drop`` reads it: did other processes take its CPU, or this rank's
device, from the run?

Fed every hardware sample (the sampler thread) and asked by the training thread, so it
keeps its samples behind a lock. For a span of time it answers with a ``Load``: the share of
the host's CPU the other processes took (``cpu_percent`` less ``process_cpu_percent``), how
busy the host was, how long this process's threads waited for a CPU per second (summed over
its threads: ``cpu_wait_s``), the other processes that took the most (``cpu_top``), and the
other processes on this rank's devices (``devices[].others``, where the tools list them).

Contention explains a slowdown (``explains``) when
- this process's threads waited longer for a CPU, per step, by at least ``SHARE`` of what
  the step grew, beyond the wait that the baseline's contention would give the CPU it uses
  per step now: at the baseline they waited ``waiting`` seconds per second while the process
  held its share of the host; a run that does more work per step on a host as busy as then
  (its share and its threads' wait per second as they were) waits as much longer per step
  as it computes longer, and that is its own work. So the wait at the baseline counts times
  the growth of this process's CPU per step (its share times the step time), at least once
  and at most as many times as the step grew;
- while the other processes took the host's CPU: their share rose, or they held most of a
  host with no CPU to spare (``SATURATED``: a host they had filled already at the baseline
  has no share left for them to gain, and their share wavers by a few percent from sample
  to sample), or this process's own share fell as its step grew (its CPU per step grew by
  less than ``SHARE`` of what the step grew, relatively: the work of a step spread over
  longer). On a host that others kept busy while the baseline was learned, the process
  holds a few percent of it: a few points more for the others read as noise, the same
  points off its own share as a large fall, and the host's busy percent wavers around
  ``SATURATED``. Work of the run's own (a slower kernel, a sleep, I/O, a collective's wait)
  is no wait for a CPU, and the run's own threads crowding each other (more input workers)
  use more CPU per step and leave the others' share as it was, or take from it (on a
  saturated host that the others hold most of, those threads wait for the others too, and
  the others are named). What the rule cannot tell apart: a run whose threads spin while
  they wait for each other (a thread pool whose worker lost its CPU) burns more CPU per
  step as it is crowded; where its share and its wait per second stay as they were, that
  reads as more work of its own ("compute");
- or a process that was not on one of this rank's devices at the baseline is there now,
  computing (NVML's share of the SMs, at least ``DEVICE_SHARE``) or of unknown share
  (npu-smi lists the processes on a chip and their memory, not their share of it).
"""
from __future__ import annotations

import itertools
import threading
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from ..basics import format as fmt
from ..observation import HardwareSample
from ..records import DeviceProcess, TopProcess, device_label
from .base import is_finite

SHARE = 0.5           # of the step's growth that more waiting for a CPU must account for
MIN_RISE = 1.0        # percent of the host: the other processes' share must rise by this
# percent of the host busy: no CPU to spare. A 2-core host that other processes filled read
# 88-98% busy per 2 s sample while this process's threads waited for a CPU (its load comes
# in bursts). At 95% a CI run blamed the demo's compute for a slowdown beside the suite's
# workers; its samples were not kept, and such a sample below 95% is the likeliest cause.
SATURATED = 90.0
HELD = 50.0           # percent of the host: a saturated host's others hold at least this
# percent of the host: the least own share a ratio of CPU per step is taken from (the
# sampler rounds process_cpu_percent to 0.1; a process that used nothing has no ratio)
MIN_OWN = 0.5
DEVICE_SHARE = 10.0   # percent of a device's SMs: a newcomer computing on it
KEPT = 3600           # samples (2 h at the default 2 s): the spans asked about are recent
WAIT_S = 10.0         # the least time a drop waits for a sample that covers its slow steps
TOP_AGE_S = 60.0      # the oldest cpu_top that still names a contention (scans are sparse)
NAMED_SHARE = 10.0    # percent of the host: the sampler names others from this (TOP_SHARE)

Processes = Mapping[str, Sequence[Mapping[str, Any]]]     # device label -> its others


class _Sample(NamedTuple):
    start: float              # each sample covers (start, end], Unix s
    end: float
    wait: float | None        # this process's threads' wait for a CPU, s
    busy: float               # the host's CPU load, %
    others: float             # the other processes' part of it, %
    top: Sequence[Any]        # cpu_top
    devices: Processes        # the other processes on this rank's devices


@dataclass(frozen=True)
class Load:
    others_percent: float       # the other processes' part of the host's CPU, mean
    busy_percent: float         # the host's CPU load, mean
    waiting: float              # seconds this process's threads waited for a CPU, per second
    top: Sequence[Any]          # the latest ``cpu_top`` up to the span's end (TopProcess)
    # the latest list of the other processes on each of this rank's devices that has one
    devices: Processes = field(default_factory=dict)

    @property
    def own_percent(self) -> float:
        """This process's part of the host's CPU (with its children), mean."""
        return max(self.busy_percent - self.others_percent, 0.0)

    def wait_per_step(self, step_s: float) -> float:
        return self.waiting * step_s


class HostLoad:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._samples: deque[_Sample] = deque(maxlen=KEPT)
        self._last: float | None = None

    def add(self, sample: HardwareSample) -> None:
        busy, own = sample.cpu_percent, sample.process_cpu_percent
        last, self._last = self._last, sample.time
        if last is None or not is_finite(busy) or not is_finite(own) or sample.time <= last:
            return
        wait = sample.cpu_wait_s if is_finite(sample.cpu_wait_s) else None
        devices = {device_label(d, " ").upper(): d.others for d in sample.devices
                   if d.others is not None}
        with self._lock:
            self._samples.append(_Sample(last, sample.time, wait, busy, max(busy - own, 0.0),
                                         sample.cpu_top or (), devices))

    def covers(self, start: float) -> bool:
        """Whether a sample has come whose whole interval is after ``start``, or none will
        (none with this process's CPU has come: no sampler, or one that cannot read it).
        Where the other processes took a share worth naming since, it waits one sample more
        for their names: the sampler seeds a scan as a contention starts, and its next sample
        names them (an older scan would name who took the CPU before)."""
        with self._lock:
            if not self._samples:
                return True
            after = list(itertools.takewhile(lambda s: s.start >= start,
                                             reversed(self._samples)))
        return bool(after) and (any(s.top for s in after) or len(after) >= 2
                                or after[0].others < NAMED_SHARE)

    def deadline(self, now: float) -> float:
        """How long to wait, from ``now``, for a sample to cover what just happened: three of
        the longest intervals lately (at least ``WAIT_S``)."""
        with self._lock:
            longest = max((s.end - s.start for s in list(self._samples)[-10:]), default=0.0)
        return now + max(3 * longest, WAIT_S)

    def since(self, start: float, end: float) -> Load | None:
        """The load over the samples whose whole interval lies after ``start`` (up to
        ``end``), else over those that cover part of it."""
        with self._lock:
            after = [s for s in reversed(self._samples) if start <= s.start < end]
            top = next((s.top for s in after if s.top), None) or self._top_before(end)
        return _load(after, top) if after else self.over(start, end)

    def over(self, start: float, end: float, *, latest: bool = True) -> Load | None:
        """The load over the samples that cover part of [start, end] (with ``latest``, the
        latest one when none does yet: the sampler has not come round since); None without
        samples."""
        samples = []
        with self._lock:
            for sample in reversed(self._samples):         # the spans asked about are recent
                if sample.end <= start:
                    break
                if sample.start < end:
                    samples.append(sample)
            if not samples and self._samples and latest:
                samples = [self._samples[-1]]
            top = self._top_before(end)
        return _load(samples, top) if samples else None

    def _top_before(self, end: float) -> Sequence[Any]:
        """The latest ``cpu_top`` up to ``end``, within ``TOP_AGE_S`` of it: the sampler
        names the processes once a contention starts, then only now and then."""
        for sample in reversed(self._samples):
            if sample.end < end - TOP_AGE_S:
                break
            if sample.top and sample.start < end:
                return sample.top
        return ()


def _load(samples: list[_Sample], top: Sequence[Any]) -> Load:
    """Of samples in reverse time order."""
    waits = [(s.end - s.start, s.wait) for s in samples if s.wait is not None]
    seconds = sum(span for span, _ in waits)
    devices: dict[str, Sequence[Mapping[str, Any]]] = {}
    for sample in samples:                               # the latest list of each device
        for label, others in sample.devices.items():
            devices.setdefault(label, others)
    return Load(others_percent=sum(s.others for s in samples) / len(samples),
                busy_percent=sum(s.busy for s in samples) / len(samples),
                waiting=sum(wait for _, wait in waits) / seconds if seconds else 0.0,
                top=top, devices=devices)


def newcomers(then: Load, now: Load) -> dict[str, list[Mapping[str, Any]]]:
    """Per device of this rank: the processes on it now that were not at the baseline and
    compute there (their share unknown, or at least DEVICE_SHARE)."""
    found = {}
    for label, others in now.devices.items():
        before = then.devices.get(label)
        if before is None:                   # not listed at the baseline: nothing to compare
            continue
        known = {p.get(DeviceProcess.PID) for p in before}
        new = [p for p in others if p.get(DeviceProcess.PID) not in known
               and not (is_finite(p.get(DeviceProcess.UTIL_PERCENT))
                        and p[DeviceProcess.UTIL_PERCENT] < DEVICE_SHARE)]
        if new:
            found[label] = new
    return found


def explains(then: Load | None, now: Load | None, step_then: float, step_now: float
             ) -> bool:
    """Whether contention for the host's CPU or this rank's devices explains the step
    growing from ``step_then`` to ``step_now`` seconds (``then``: the load at the baseline,
    ``now``: over the slow steps)."""
    if then is None or now is None or step_now <= step_then:
        return False
    return (_waited(then, now, step_then, step_now) >= SHARE * (step_now - step_then)
            and _others_took(then, now, step_then, step_now)) or bool(newcomers(then, now)) \
        or bool(cpu_newcomers(then, now))


def cpu_newcomers(then: Load, now: Load) -> list[Mapping[str, Any]]:
    """The busiest other processes of the host now (``cpu_top``) that were not among them
    at the baseline, when the baseline was busy enough to have its own list: on a host the
    others kept saturated, processes that came since are contention its shares cannot show
    (the others' part was near all of it before and after)."""
    if not then.top:
        return []
    known = {p.get(TopProcess.PID) for p in then.top if isinstance(p, Mapping)}
    return [p for p in now.top if isinstance(p, Mapping)
            and p.get(TopProcess.PID) not in known]


def _cpu_ratio(then: Load, now: Load, step_then: float, step_now: float) -> float | None:
    """How many times its CPU per step at the baseline this process uses now (its share of
    the host times the step time); None when it held too little then to tell."""
    if then.own_percent < MIN_OWN:
        return None
    return now.own_percent * step_now / (then.own_percent * step_then)


def _waited(then: Load, now: Load, step_then: float, step_now: float) -> float:
    """Seconds per step this process's threads waited for a CPU beyond what the baseline's
    contention gives the CPU it uses per step now: its wait per step then, times the growth
    of its CPU per step, from once to as many times as the step grew (more than that, its
    share of the host rose: no one crowded it out, and one low reading of its share at the
    baseline, a child's CPU leaving the count, would make any wait its own)."""
    grown = min(max(_cpu_ratio(then, now, step_then, step_now) or 1.0, 1.0),
                step_now / step_then)
    return now.wait_per_step(step_now) - grown * then.wait_per_step(step_then)


def _others_took(then: Load, now: Load, step_then: float, step_now: float) -> bool:
    """Whether the other processes took more of the host, held most of a saturated one, or
    left this process a smaller share as its step grew."""
    return _rose(then, now) or (now.busy_percent >= SATURATED and now.others_percent >= HELD) \
        or _own_fell(then, now, step_then, step_now)


def _rose(then: Load, now: Load) -> bool:
    return now.others_percent - then.others_percent >= MIN_RISE


def _own_fell(then: Load, now: Load, step_then: float, step_now: float) -> bool:
    """Whether this process's CPU per step grew by less than SHARE of what its step grew
    (each relative to the baseline's): what a step did took longer, not more CPU."""
    ratio = _cpu_ratio(then, now, step_then, step_now)
    return ratio is not None and ratio - 1 < SHARE * (step_now / step_then - 1)


def describe(then: Load, now: Load, step_then: float, step_now: float) -> str:
    """What took the CPU or the device, for the anomaly's message."""
    said = []
    came = cpu_newcomers(then, now)
    if came:
        said.append("other processes came onto the host's CPU since the baseline: " + ", ".join(
            f"pid {p.get(TopProcess.PID)} {p.get(TopProcess.NAME)} "
            f"{p.get(TopProcess.CPU_PERCENT)}%" for p in came))
    for label, new in newcomers(then, now).items():
        named = ", ".join(_device_process(p) for p in new)
        said.append(f"other processes came onto {label}: {named}")
    if _others_took(then, now, step_then, step_now):
        named = ", ".join(f"pid {p.get(TopProcess.PID)} {p.get(TopProcess.NAME)} "
                          f"{p.get(TopProcess.CPU_PERCENT)}%" for p in now.top
                          if isinstance(p, Mapping))
        if _rose(then, now):
            share = (f"their share rose from {then.others_percent:.0f}% to "
                     f"{now.others_percent:.0f}% of it")
        elif now.busy_percent >= SATURATED and now.others_percent >= HELD:
            share = (f"they held {now.others_percent:.0f}% of it "
                     f"({then.others_percent:.0f}% before)")
        else:
            share = (f"this process's share of it fell from {then.own_percent:.1f}% to "
                     f"{now.own_percent:.1f}% as its step grew "
                     f"{step_now / step_then:.3g}x (theirs {then.others_percent:.0f}% before, "
                     f"{now.others_percent:.0f}% now)")
        said.append(
            f"other processes took the host's CPU: {share} (the host "
            f"{now.busy_percent:.0f}% busy{'; the most: ' + named if named else ''}), and "
            f"this process's threads, between them, waited "
            f"{fmt.duration(now.wait_per_step(step_now))} per step for a CPU "
            f"({fmt.duration(then.wait_per_step(step_then))} before)")
    return "; ".join(said)


def _device_process(process: Mapping[str, Any]) -> str:
    share = process.get(DeviceProcess.UTIL_PERCENT)
    memory = process.get(DeviceProcess.MEM_USED_MB)
    known = [*([f"{share:.0f}% of its compute"] if is_finite(share) else []),
             *([fmt.megabytes(memory)] if is_finite(memory) else [])]
    return (f"pid {process.get(DeviceProcess.PID)} {process.get(DeviceProcess.NAME) or '?'}"
            + (f" ({', '.join(known)})" if known else ""))
