"""Host state (CPU load, memory, this process's resident memory) through psutil.

Units: GB here are decimal, 1 GB = 1e9 bytes, as in the run log's ``mem_used_gb``/``rss_gb``.
"""
from __future__ import annotations

from typing import Any

from ..basics.once import OnceMessages
from ..basics.units import GB
from ..records import Hardware
from .cpu_share import CpuShares


def _import_psutil():
    try:
        import psutil
    except ImportError as exc:
        raise ImportError("host hardware sampling needs psutil: pip install psutil") from exc
    return psutil


def _total_and_busy(times) -> tuple:
    # The same accounting as psutil.cpu_percent: guest time is already inside user/nice,
    # and iowait is idle time that Linux books apart from "idle".
    total = sum(times) - getattr(times, "guest", 0) - getattr(times, "guest_nice", 0)
    busy = total - times.idle - getattr(times, "iowait", 0)
    return total, busy


class HostProbe:
    """``sample()`` -> a dict of ``records.Hardware.HOST_FIELDS``: CPU load, host memory used
    and available, this process's resident memory, and (``shares``) this process's part of
    the CPU load, its threads' wait for a CPU and the other processes that took the most
    (``cpu_share.CpuShares``).

    ``cpu_percent`` is the system-wide CPU load (0..100, averaged over all cores) since the
    previous call, or since construction for the first one: non-blocking, like
    ``psutil.cpu_percent(interval=None)``. It keeps its own baseline instead of calling that
    function because psutil keys its baseline by the *calling thread*: a probe built on the
    main thread and sampled on the sampler thread would report a meaningless 0.0 first, and
    another library calling ``psutil.cpu_percent`` on the same thread would steal our interval.
    ``None`` when no CPU time has elapsed yet (a made-up 0.0 would read as "idle").

    ``mem_used_gb`` + ``mem_available_gb`` is the machine's total memory on Linux (psutil
    defines used = total - available there). Each field is ``None`` when its psutil call
    fails; ``sample()`` never raises. Safe to call from one thread at a time.
    """

    def __init__(self, psutil_module: Any = None, *, shares: bool = True):
        self._psutil = psutil_module or _import_psutil()
        self._messages = OnceMessages()
        self._process = self._psutil.Process()
        self._last_cpu = self._read_cpu()  # the "primed once at construction" baseline
        self._shares: CpuShares | None = None
        if shares:
            try:
                self._shares = CpuShares(self._psutil)
                self._shares.sample(None, None)        # their baselines, primed alike
            except Exception as exc:
                self._shares = None
                self._report("process CPU", exc)

    def _read_cpu(self) -> tuple | None:
        try:
            return _total_and_busy(self._psutil.cpu_times())
        except Exception as exc:
            self._report("cpu_times", exc)
            return None

    def _report(self, what: str, exc: Exception) -> None:
        self._messages.report((what, exc.__class__.__name__),
                              f"host probe: psutil {what} failed "
                              f"({exc.__class__.__name__}: {exc}); that field is null")

    def pop_new_messages(self) -> list:
        return self._messages.pop()

    def cpu_percent(self) -> float | None:
        return self._cpu()[1]

    def _cpu(self) -> tuple[float | None, float | None]:
        """The host's CPU seconds since the previous call (all cores), and its load."""
        now = self._read_cpu()
        last, self._last_cpu = self._last_cpu, now
        if now is None or last is None:
            return None, None
        total = now[0] - last[0]
        if total <= 0:
            return None, None
        busy = max(0.0, now[1] - last[1])  # counters can step back a little (psutil #392)
        return total, round(min(100.0, 100.0 * busy / total), 1)

    def sample(self) -> dict[str, Any]:
        out: dict[str, Any] = dict.fromkeys(Hardware.HOST_FIELDS)
        total, out[Hardware.CPU_PERCENT] = self._cpu()
        if self._shares is not None:
            try:
                out.update(self._shares.sample(total, out[Hardware.CPU_PERCENT]))
            except Exception as exc:
                self._report("process CPU", exc)
        try:
            memory = self._psutil.virtual_memory()
            out[Hardware.MEM_USED_GB] = memory.used / GB
            out[Hardware.MEM_AVAILABLE_GB] = memory.available / GB
        except Exception as exc:
            self._report("virtual_memory", exc)
        try:
            out[Hardware.RSS_GB] = self._process.memory_info().rss / GB
        except Exception as exc:
            self._report("memory_info", exc)
        return out
