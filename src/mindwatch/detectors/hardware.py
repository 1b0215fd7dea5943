"""Rules on hardware samples: overheating devices and memory running out.

Both fire once per episode: when a condition has held for ``consecutive`` samples in a row,
and again only after it has cleared. A missing reading (``None``, NaN) neither extends nor
ends a streak: "unknown" is no evidence that a device cooled down or freed memory.
Detectors do not know the training step, so ``Anomaly.step`` is ``None``; the monitor fills
it in. Streaks are keyed ``"<type>:<index>"`` so the state is plain JSON.
"""
from __future__ import annotations

from typing import Any

from ..anomaly import MEMORY_PRESSURE, OVERHEAT, Anomaly
from ..basics.arguments import checked
from ..basics.checks import check_int, check_number
from ..observation import DeviceSample, HardwareSample
from ..records import device_label
from .base import Detector, is_finite

HOST = "host"


def _check_fraction(name: str, value: Any) -> float | None:
    """A fraction in (0, 1], or None: that check is off."""
    checked(check_number, name, value, low=0.0, low_open=True, high=1.0, optional=True)
    return None if value is None else float(value)


def _key(device: DeviceSample) -> str:
    return device_label(device, ":")                          # "npu:0", plain JSON state


def _label(device: DeviceSample) -> str:
    return device_label(device, " ").upper()                  # "NPU 0", for messages


class _Streaks:
    """Per-key run lengths of a condition; ``step`` says whether this sample starts an alarm."""

    def __init__(self, consecutive: int):
        self.consecutive = consecutive
        self.counts: dict[str, int] = {}

    def step(self, key: str, condition: bool | None) -> bool:
        if condition is None:
            return False
        if not condition:
            self.counts.pop(key, None)
            return False
        self.counts[key] = self.counts.get(key, 0) + 1
        return self.counts[key] == self.consecutive  # exactly then: one alarm per episode


class _StreakDetector(Detector):
    """What both hardware rules share: per-device streaks, their wording and their state."""

    watches_hardware = True

    def __init__(self, consecutive: int):
        checked(check_int, "consecutive", consecutive, minimum=1)
        self._streaks = _Streaks(consecutive)

    def _samples_text(self) -> str:
        n = self._streaks.consecutive
        return f"for {n} consecutive hardware sample{'s' if n > 1 else ''}"

    def state_dict(self) -> dict[str, Any]:
        return {"streaks": dict(self._streaks.counts)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._streaks.counts = {str(k): int(v) for k, v in state.get("streaks", {}).items()}


class OverheatDetector(_StreakDetector):
    """``overheat`` when a device's ``temp_c`` >= ``max_temperature_c`` for ``consecutive``
    samples in a row (per device). value = temperature, threshold = the limit."""

    def __init__(self, max_temperature_c: float = 85.0, consecutive: int = 3):
        checked(check_number, "max_temperature_c", max_temperature_c)
        self.max_temperature_c = float(max_temperature_c)
        super().__init__(consecutive)

    def update_hardware(self, sample: HardwareSample) -> list[Anomaly]:
        found = []
        limit = self.max_temperature_c
        for device in sample.devices:
            temp = device.temp_c if is_finite(device.temp_c) else None
            if self._streaks.step(_key(device), None if temp is None else temp >= limit):
                found.append(Anomaly(
                    OVERHEAT, None, temp, limit,
                    f"{_label(device)} temperature {temp:g} C >= {limit:g} C "
                    f"{self._samples_text()}"))
        return found


class MemoryPressureDetector(_StreakDetector):
    """``memory_pressure`` when, for ``consecutive`` samples in a row, a device's
    ``mem_used_mb / mem_total_mb`` >= ``device_fraction`` (value = that fraction), or the
    host's available memory is below ``host_available_fraction`` of its total (value = the
    available fraction). Host total is taken as ``mem_used_gb + mem_available_gb``: exact on
    Linux, where psutil defines used = total - available; an approximation elsewhere.
    Either fraction ``None`` turns that check off.
    """

    def __init__(self, device_fraction: float | None = 0.95,
                 host_available_fraction: float | None = 0.05, consecutive: int = 2):
        self.device_fraction = _check_fraction("device_fraction", device_fraction)
        self.host_available_fraction = _check_fraction("host_available_fraction",
                                                       host_available_fraction)
        super().__init__(consecutive)

    def update_hardware(self, sample: HardwareSample) -> list[Anomaly]:
        found = []
        # An unknown reading (None, NaN, no total) leaves its streak as it is: step() is not
        # called for it.
        limit = self.device_fraction
        if limit is not None:
            for device in sample.devices:
                used, total = device.mem_used_mb, device.mem_total_mb
                if not (is_finite(used) and is_finite(total) and total > 0):
                    continue
                fraction = used / total
                if self._streaks.step(_key(device), fraction >= limit):
                    found.append(Anomaly(
                        MEMORY_PRESSURE, None, fraction, limit,
                        f"{_label(device)} memory {100 * fraction:.1f}% used ({used:g} of "
                        f"{total:g} MB) >= {100 * limit:g}% {self._samples_text()}"))
        host = self.host_available_fraction
        if host is not None:
            used, available = sample.mem_used_gb, sample.mem_available_gb
            if is_finite(used) and is_finite(available) and used + available > 0:
                fraction = available / (used + available)
                if self._streaks.step(HOST, fraction < host):
                    found.append(Anomaly(
                        MEMORY_PRESSURE, None, fraction, host,
                        f"host memory: only {100 * fraction:.1f}% available ({available:.3g} "
                        f"of ~{used + available:.3g} GB) < {100 * host:g}% "
                        f"{self._samples_text()}"))
        return found
