"""The other processes on a GPU, through NVML: who else computes on this rank's device.

``nvmlDeviceGetComputeRunningProcesses`` lists the processes with a compute context on the
GPU and their memory; ``nvmlDeviceGetProcessUtilization`` their share of its SMs since a
timestamp (NVML keeps a short history; it raises NOT_FOUND when there is no new sample,
which leaves the share unknown). A GPU none of ``own_pids`` runs on is not this rank's: its
processes are not listed (another rank's are not contention).
"""
from __future__ import annotations

from collections.abc import Collection
from typing import Any

from ..basics.numbers import to_number
from ..basics.units import MB
from ..records import DeviceProcess


class GpuProcesses:
    def __init__(self, nvml: Any, own_pids: Collection[int]):
        self._nvml, self._own = nvml, frozenset(own_pids)
        self._seen: dict[int, int] = {}        # GPU index -> the latest sample's timestamp, us

    def others(self, index: int, handle: Any) -> list[dict[str, Any]] | None:
        """The other processes on GPU ``index``; None when none of ``own_pids`` is on it.
        Raises what NVML raises for the process list (the caller says it once)."""
        nvml = self._nvml
        running = {int(p.pid): getattr(p, "usedGpuMemory", None)
                   for p in nvml.nvmlDeviceGetComputeRunningProcesses(handle)}
        if not self._own & running.keys():
            return None
        shares: dict[int, list[float]] = {}
        try:
            for sample in nvml.nvmlDeviceGetProcessUtilization(handle, self._seen.get(index, 0)):
                shares.setdefault(int(sample.pid), []).append(float(sample.smUtil))
                self._seen[index] = max(self._seen.get(index, 0), int(sample.timeStamp))
        except Exception:       # NOT_FOUND: no sample since the last call; not supported
            pass
        return [{DeviceProcess.PID: pid, DeviceProcess.NAME: self._name(pid),
                 DeviceProcess.MEM_USED_MB: _megabytes(used),
                 DeviceProcess.UTIL_PERCENT: (sum(shares[pid]) / len(shares[pid])
                                              if pid in shares else None)}
                for pid, used in running.items() if pid not in self._own]

    def _name(self, pid: int) -> str | None:
        try:
            name = self._nvml.nvmlSystemGetProcessName(pid)
        except Exception:
            return None
        name = name.decode(errors="replace") if isinstance(name, bytes) else str(name)
        return name.rsplit("/", 1)[-1] or None


def _megabytes(used: Any) -> float | None:
    number = to_number(used)       # None: NVML_VALUE_NOT_AVAILABLE under some drivers
    return None if number is None else number / MB
