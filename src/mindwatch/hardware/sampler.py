"""Hardware sampling on a daemon thread, so the training step never waits for a probe.

Threading, kept simple on purpose:
- one sampler thread calls the probes and ``on_sample``; ``sample_once`` does the same on the
  caller's thread. An ``RLock`` serialises the two, so probes are never called concurrently
  and samples reach ``on_sample`` in time order; ``on_sample`` may itself call ``stop``.
- ``on_sample`` runs on the sampler thread: it must do its own locking against the training
  thread (the monitor takes its lock there) and should be quick.
- ``latest`` is a plain attribute replaced whole, safe to read from any thread.
- ``stop``/``close`` never wait on a probe for more than ``join_timeout_s``: ``close`` first
  interrupts the probes that can be (a running ``npu-smi`` is killed), and a thread stuck in
  one that cannot (an NVML call) is left behind as a daemon that ends on its own and does not
  call ``on_sample`` again.
"""
from __future__ import annotations

import contextlib
import math
import os
import shutil
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ..basics.arguments import checked
from ..basics.checks import check_number
from ..basics.once import OnceMessages
from ..observation import DeviceSample, HardwareSample
from ..records import Hardware
from .framework_memory import FrameworkMemoryProbe, Reader
from .npu_smi import NpuSmiProbe, visible_devices_from_env
from .nvml import NvmlProbe


class UnavailableProbe:
    """Stands in for a probe that could not be built; says why once, samples nothing."""

    def __init__(self, message: str, empty: Any = None):
        self._messages = [message]
        self._empty = empty

    def sample(self) -> Any:
        return self._empty() if callable(self._empty) else self._empty

    def pop_new_messages(self) -> list[str]:
        new, self._messages = self._messages, []
        return new


def default_probes(*, all_devices: bool = False, env: Mapping[str, str] | None = None,
                   framework_reader: Reader | None = None) -> dict[str, Any]:
    """Keyword arguments for ``HardwareSampler``: ``host``, ``devices``, ``framework_memory``.

    Host through psutil (when missing, a stand-in that says how to install it); NPUs
    through ``npu-smi`` when it is on ``PATH`` (this rank's devices from
    ``visible_devices_from_env``, or every one with ``all_devices``); GPUs through NVML
    where an NVIDIA driver is installed (it turns itself off, saying why once, when the
    driver finds no GPU).
    """
    env = os.environ if env is None else env
    try:
        from .host import HostProbe
        host: Any = HostProbe()
    except ImportError as exc:
        host = UnavailableProbe(f"host sampling is off: {exc}", empty=dict)
    devices: list[Any] = []
    npu_smi = _on_path("npu-smi", env.get("PATH", os.defpath))
    if npu_smi is not None:  # the found path: ``env``'s PATH may not be this process's
        devices.append(NpuSmiProbe(executable=npu_smi,
                                   devices=None if all_devices else visible_devices_from_env(env)))
    if _nvidia_driver_present(env):
        devices.append(NvmlProbe())
    framework = FrameworkMemoryProbe(framework_reader) if framework_reader is not None else None
    return {"host": host, "devices": devices, "framework_memory": framework}


def _on_path(name: str, path: str) -> str | None:
    """The first ``name`` on ``path`` that can be run, else the first file of that name: one
    that lost its x bit is then reported (once) instead of being ignored in silence."""
    found = shutil.which(name, path=path)
    if found is not None:
        return found
    candidates = (os.path.join(folder, name) for folder in path.split(os.pathsep) if folder)
    return next((c for c in candidates if os.path.isfile(c)), None)


def _nvidia_driver_present(env: Mapping[str, str]) -> bool:
    """NVML only where an NVIDIA driver is installed: elsewhere (CPU hosts, Ascend nodes) the
    probe could only say, on every run, that there is no GPU."""
    return (os.path.exists("/proc/driver/nvidia/version")
            or shutil.which("nvidia-smi", path=env.get("PATH")) is not None)


class HardwareSampler:
    """Samples every ``interval_s`` seconds (the first at ``start``) and hands each
    ``HardwareSample`` to ``on_sample``. A probe or ``on_sample`` that raises is counted in
    ``errors`` and reported once per place and exception type (``pop_new_messages``, which
    also collects the probes' own messages); sampling goes on.

    ``host.sample()`` -> dict of HardwareSample's host fields; each of ``devices`` ->
    ``list[DeviceSample]``; ``framework_memory.sample()`` -> dict or None. ``clock`` stamps
    samples; the schedule itself runs on ``time.monotonic``.
    """

    def __init__(self, *, interval_s: float, on_sample: Callable[[HardwareSample], None],
                 host: Any = None, devices: Sequence[Any] = (), framework_memory: Any = None,
                 clock: Callable[[], float] = time.time, join_timeout_s: float = 1.0):
        checked(check_number, "interval_s", interval_s, low=0.0, low_open=True)
        if not callable(on_sample):
            raise TypeError(f"on_sample must be callable; got {type(on_sample).__name__}")
        self.interval_s = float(interval_s)
        self.on_sample = on_sample
        self.host = host
        self.devices = list(devices)
        self.framework_memory = framework_memory
        self.clock = clock
        self.join_timeout_s = join_timeout_s
        self.latest: HardwareSample | None = None
        self.samples = 0
        self.errors = 0
        self._lock = threading.RLock()
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._messages = OnceMessages()

    # -- life cycle -------------------------------------------------------------------------
    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive() and not self._stop.is_set()

    def start(self) -> None:
        if self.running:
            return
        self._stop = threading.Event()  # a fresh one: a lingering old thread keeps its own
        self._thread = threading.Thread(target=self._run, args=(self._stop,),
                                        name="mindwatch-hardware", daemon=True)
        self._thread.start()

    def stop(self, timeout_s: float | None = None) -> bool:
        """Stop and join; True when the thread ended within the timeout. Idempotent.

        A thread still inside a slow probe when the timeout passes ends on its own and does
        not call ``on_sample`` again.
        """
        thread, self._thread = self._thread, None
        self._stop.set()
        if thread is None:
            return True
        if thread is not threading.current_thread():  # from on_sample: no self-join
            thread.join(self.join_timeout_s if timeout_s is None else timeout_s)
        return not thread.is_alive() or thread is threading.current_thread()

    def close(self) -> None:
        """``stop`` and release what probes hold (NVML), within about ``join_timeout_s``:
        probes with ``interrupt`` (``npu-smi``: kills a running call) are interrupted first,
        since their ``sample`` may be running now."""
        self._stop.set()
        probes = [self.host, *self.devices, self.framework_memory]
        for probe in probes:
            if hasattr(probe, "interrupt"):
                self._call("interrupt", probe, probe.interrupt, None)
        self.stop()
        for probe in probes:
            if hasattr(probe, "close"):
                self._call("close", probe, probe.close, None)

    def _run(self, stop: threading.Event) -> None:
        due = time.monotonic()
        while not stop.is_set():
            try:
                self._tick(stop)
            except Exception as exc:   # the thread must outlive any surprise in a sample
                self.errors += 1
                self._report(("tick", exc.__class__.__name__),
                             f"hardware sampler: a sample failed ({exc.__class__.__name__}: "
                             f"{exc}); sampling goes on (reported once)")
            due += self.interval_s
            now = time.monotonic()
            if due < now:  # a probe overran: skip the missed slots rather than catch up
                due += math.ceil((now - due) / self.interval_s) * self.interval_s
            stop.wait(due - now)

    # -- sampling ---------------------------------------------------------------------------
    def sample_once(self) -> HardwareSample:
        """Take one sample now on this thread, hand it to ``on_sample`` and return it."""
        return self._tick(None)

    def _tick(self, stop: threading.Event | None) -> HardwareSample:
        with self._lock:
            sample = self._build()
            self.latest = sample
            self.samples += 1
            if stop is None or not stop.is_set():
                self._call("on_sample", None, self.on_sample, None, sample)
            return sample

    def _build(self) -> HardwareSample:
        sample = HardwareSample(time=self.clock())
        if self.host is not None:
            host = self._call("host", self.host, self.host.sample, None)
            if isinstance(host, Mapping):
                for field in Hardware.HOST_FIELDS:
                    setattr(sample, field, host.get(field))
        for probe in self.devices:
            found = self._call("devices", probe, probe.sample, None)
            if isinstance(found, (list, tuple)):
                sample.devices.extend(d for d in found if isinstance(d, DeviceSample))
        if self.framework_memory is not None:
            sample.framework_memory = self._call("framework_memory", self.framework_memory,
                                                 self.framework_memory.sample, None)
        return sample

    def _call(self, place: str, owner: Any, function: Callable, default: Any, *args: Any) -> Any:
        try:
            return function(*args)
        except Exception as exc:
            self.errors += 1
            name = place if owner is None else f"{type(owner).__name__} ({place})"
            self._report((name, exc.__class__.__name__),
                         f"hardware sampler: {name} raised {exc.__class__.__name__}: {exc}; "
                         "sampling goes on (reported once)")
            return default

    # -- messages ---------------------------------------------------------------------------
    def _report(self, key: Any, message: str) -> None:
        self._messages.report(key, message)

    def pop_new_messages(self) -> list[str]:
        """The sampler's and its probes' problems not handed out before, each once."""
        new = self._messages.pop()
        for probe in [self.host, *self.devices, self.framework_memory]:
            pop = getattr(probe, "pop_new_messages", None)
            if pop is not None:
                # a broken stand-in must not break the caller's logging
                with contextlib.suppress(Exception):
                    new.extend(pop())
        return new
