"""NVIDIA GPU state through NVML (the ``pynvml`` module of the ``nvidia-ml-py`` package).

Units follow the run log: memory in MB of 2**20 bytes (what ``nvidia-smi`` and ``npu-smi``
print as "MiB"/"MB"), temperature in degrees C, power in W (NVML reports milliwatts).
"""
from __future__ import annotations

import contextlib
import os
import warnings
from collections.abc import Sequence
from typing import Any

from ..basics.numbers import to_number
from ..basics.once import OnceMessages
from ..basics.units import MB
from ..observation import DeviceSample
from .nvml_processes import GpuProcesses

MW_PER_W = 1000                     # NVML reports power in milliwatts


class NvmlProbe:
    """``sample()`` returns one ``DeviceSample`` (type ``"gpu"``, index = NVML index) per GPU.

    NVML is initialised on the first ``sample()`` (the sampler thread pays for it, not the
    step). When that fails - ``pynvml`` not installed, no driver library, no GPU - the probe
    turns itself off (``enabled`` False, ``disabled_reason`` says why, queued once for
    ``pop_new_messages``) and later calls return ``[]`` at no cost. Each field is ``None`` when
    its NVML call raises, so one unsupported query (power on some boards) loses one number.
    Never raises.

    ``devices``: NVML indices to keep (``None``: all). NVML numbers GPUs in PCI bus order,
    which is not CUDA's default order, so ``CUDA_VISIBLE_DEVICES`` is not applied here.
    ``own_pids``: this job's processes (default: this one); a GPU one of them runs on lists
    the other processes on it (``nvml_processes.GpuProcesses``). ``module``: a stand-in for
    ``pynvml``, for tests.
    """

    def __init__(self, devices: Sequence[int] | None = None, module: Any = None,
                 own_pids: Sequence[int] | None = None):
        self.devices = None if devices is None else {int(d) for d in devices}
        self._own_pids = [os.getpid()] if own_pids is None else list(own_pids)
        self._processes: GpuProcesses | None = None
        self.enabled = True
        self.disabled_reason: str | None = None
        self._module = module
        self._handles: list[tuple[int, Any]] | None = None
        self._messages = OnceMessages()

    def pop_new_messages(self) -> list[str]:
        """Problems not handed out before, each distinct one once per probe."""
        return self._messages.pop()

    def _report(self, message: str, key: object = None) -> None:
        self._messages.report(key or message, message)

    def _disable(self, reason: str) -> None:
        self.enabled = False
        self.disabled_reason = reason
        self._report(reason)

    def _init(self) -> bool:
        if self._handles is not None:
            return True
        nvml = self._module
        if nvml is None:
            try:
                # the deprecated "pynvml" package (which SwanLab and others pull in) wraps
                # nvidia-ml-py's module and warns at import: the same module, said to the user
                # as if mindwatch had chosen it
                with warnings.catch_warnings():
                    warnings.filterwarnings("ignore", "The pynvml package is deprecated",
                                            FutureWarning)
                    import pynvml
            except ImportError:
                self._disable("NVML unavailable (pynvml is not installed; on NVIDIA GPU "
                              "machines: pip install nvidia-ml-py); GPU sampling is off")
                return False
            nvml = self._module = pynvml
        try:
            nvml.nvmlInit()
        except Exception as exc:  # NVMLError_LibraryNotFound, _DriverNotLoaded, OSError...
            self._disable(f"NVML unavailable ({exc.__class__.__name__}: {exc}); "
                          "GPU sampling is off")
            return False
        try:
            count = int(nvml.nvmlDeviceGetCount())
        except Exception as exc:
            self._disable(f"NVML could not count GPUs ({exc.__class__.__name__}: {exc}); "
                          "GPU sampling is off")
            self._shutdown()
            return False
        handles = []
        for index in range(count):
            if self.devices is not None and index not in self.devices:
                continue
            try:  # handles are stable while the process runs: fetch them once
                handles.append((index, nvml.nvmlDeviceGetHandleByIndex(index)))
            except Exception as exc:
                self._report(f"NVML cannot open GPU {index} ({exc.__class__.__name__}: "
                             f"{exc}); it is not sampled")
        if not handles:
            self._disable("NVML sees no GPU" + ("" if self.devices is None else
                          f" among {sorted(self.devices)}") + "; GPU sampling is off")
            self._shutdown()
            return False
        self._handles = handles
        self._processes = GpuProcesses(nvml, self._own_pids)
        return True

    def _device(self, index: int, handle: Any) -> DeviceSample:
        nvml = self._module
        failures: list[tuple[str, Exception]] = []

        def query(name: str, call: Any, *args: Any) -> Any:
            try:
                return call(*args)
            except Exception as exc:
                failures.append((name, exc))
                return None

        util = query("utilization", nvml.nvmlDeviceGetUtilizationRates, handle)
        memory = query("memory", nvml.nvmlDeviceGetMemoryInfo, handle)
        temp = query("temperature", nvml.nvmlDeviceGetTemperature, handle,
                     getattr(nvml, "NVML_TEMPERATURE_GPU", 0))
        power = query("power", nvml.nvmlDeviceGetPowerUsage, handle)
        if len(failures) == 4:
            # nothing answered: the GPU itself is gone (fallen off the bus, being reset), one
            # problem however many fields it costs
            exc = failures[0][1]
            self._report(f"NVML: GPU {index} does not answer ({exc.__class__.__name__}: "
                         f"{exc}); its values are null while it does not", key=("lost", index))
        else:
            for name, exc in failures:
                # key without the index: one unsupported query on 8 boards is one message
                self._report(f"NVML {name} failed on GPU {index} ({exc.__class__.__name__}: "
                             f"{exc}); that field is null", key=f"{name} {exc.__class__.__name__}")
        return DeviceSample(
            "gpu", index,
            util_percent=to_number(getattr(util, "gpu", None)),
            mem_used_mb=_scaled(getattr(memory, "used", None), MB),
            mem_total_mb=_scaled(getattr(memory, "total", None), MB),
            temp_c=to_number(temp),
            power_w=_scaled(power, MW_PER_W),
            others=None if len(failures) == 4 else self._others(index, handle))

    def _others(self, index: int, handle: Any) -> list[dict[str, Any]] | None:
        if self._processes is None:
            return None
        try:
            return self._processes.others(index, handle)
        except Exception as exc:
            self._report(f"NVML cannot list the processes on GPU {index} "
                         f"({exc.__class__.__name__}: {exc}); other processes on it are not "
                         "known", key=f"processes {exc.__class__.__name__}")
            return None

    def sample(self) -> list[DeviceSample]:
        if not self.enabled:
            return []
        try:
            if not self._init():
                return []
            handles = self._handles
            if handles is None:     # set by a successful _init(), unless close() raced it
                return []
            return [self._device(index, handle) for index, handle in handles]
        except Exception as exc:  # a stand-in or a new pynvml may break any assumption
            self._report(f"GPU sampling failed: {exc.__class__.__name__}: {exc}",
                         key=f"sample raised {exc.__class__.__name__}")
            return []

    def _shutdown(self) -> None:
        with contextlib.suppress(Exception):  # nothing to release, or nothing we could do about it
            self._module.nvmlShutdown()

    def close(self) -> None:
        """Release NVML; a later ``sample()`` initialises it again."""
        if self._handles is not None:
            self._handles = None
            self._shutdown()


def _scaled(value: Any, unit: float) -> float | None:
    number = to_number(value)
    return None if number is None else number / unit
