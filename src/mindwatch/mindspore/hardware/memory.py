"""MindSpore's memory-pool accounting, as a reader for ``hardware.FrameworkMemoryProbe``."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ...basics.units import (
    MB,  # the same MB as the device samples, so pool and device figures compare
)
from ...records import FrameworkMemory
from ..compat import RUNTIME_MEMORY

# MindSpore documents these as "always 0" on CPU: no pool is tracked there, so 0 is not news
UNTRACKED_TARGETS = ("CPU",)


def mindspore_memory_reader(module: Any = None) -> Callable[[], dict[str, Any]]:
    """A callable returning ``{"device_target", "allocated_mb", "reserved_mb",
    "max_allocated_mb", "max_reserved_mb"}`` from ``mindspore.runtime`` (MB = 2**20 bytes).

    Values are ``None`` where the backend does not report them (CPU: MindSpore returns a
    constant 0 there) or where a query fails. Prefers one ``memory_stats()`` call, a
    consistent snapshot, over the four single-value functions (each of which fetches the
    whole stats dict anyway); falls back to those when ``memory_stats`` is missing. The
    reader never raises. ``module``: a stand-in for ``mindspore``, for tests.
    """

    def read() -> dict[str, Any]:
        out: dict[str, Any] = {FrameworkMemory.DEVICE_TARGET: None, **dict.fromkeys(RUNTIME_MEMORY)}
        try:
            ms = module
            if ms is None:
                import mindspore
                ms = mindspore
            target = ms.get_context("device_target")
            out[FrameworkMemory.DEVICE_TARGET] = target if isinstance(target, str) else None
            if target in UNTRACKED_TARGETS:
                return out
            runtime = getattr(ms, "runtime", None)
            stats = _stats(runtime)
            for key, (stats_key, function) in RUNTIME_MEMORY.items():
                if stats is not None:
                    out[key] = _mb(stats.get(stats_key))
                else:
                    out[key] = _mb(_call(getattr(runtime, function, None)))
        except Exception:
            pass  # whatever was read stays; the rest is unknown
        return out

    return read


def _stats(runtime: Any) -> dict | None:
    stats = _call(getattr(runtime, "memory_stats", None))
    return stats if isinstance(stats, dict) else None


def _call(function: Callable[[], Any] | None) -> Any:
    if function is None:
        return None
    try:
        return function()
    except Exception:
        return None


def _mb(value: Any) -> float | None:
    if value is None or isinstance(value, (bool, str)):
        return None
    try:
        return float(value) / MB
    except (TypeError, ValueError):
        return None
