"""The upper bounds a protected train step compares its float32 numbers with, as both
adapters' steps hold them (``mindwatch.mindspore.step.verdict``, ``mindwatch.torch.step``).

A device compares float32 values, so a limit the host computed in float64 is rounded to
float32 first; the host then repeats a decision in float64 with the same bounds and gets the
device's answer. "No limit" is the largest float32, not inf, so that +inf itself is past it.
Framework-free: plain floats, rounded with ``struct`` as a float32 store rounds them.
"""
from __future__ import annotations

import math
import struct

FLOAT32_MAX = struct.unpack("<f", b"\xff\xff\x7f\x7f")[0]


def bound(value: float) -> float:
    """``value`` as a float32 upper bound: rounded to the nearest float32 and at most the
    largest one (beyond float32's range, or inf: no limit, yet +inf is past it; NaN: no
    limit)."""
    if math.isnan(value):
        return FLOAT32_MAX
    try:
        rounded = struct.unpack("<f", struct.pack("<f", value))[0]
    except OverflowError:               # a finite value that rounds to +-inf in float32
        rounded = math.copysign(math.inf, value)
    return min(rounded, FLOAT32_MAX)
