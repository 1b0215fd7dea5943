"""One way to print numbers and units, shared by the console, the live view and the report."""
from __future__ import annotations

import math
from typing import Optional

MISSING = "-"


def number(value: Optional[float], digits: int = 4) -> str:
    """``digits`` significant digits; exponent form outside [1e-3, 1e5)."""
    if value is None:
        return MISSING
    if not math.isfinite(value):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
    magnitude = abs(value)
    if magnitude != 0 and (magnitude >= 1e5 or magnitude < 1e-3):
        return f"{value:.{digits - 1}e}"
    return f"{value:.{digits}g}"


def lr(value: Optional[float]) -> str:
    return MISSING if value is None else f"{value:.2e}"


def duration(seconds: Optional[float]) -> str:
    """Human duration: 45.2 ms, 3.10 s, 2m05s, 1h02m."""
    if seconds is None or not math.isfinite(seconds):
        return MISSING
    if seconds < 1.0:
        return f"{seconds * 1000:.1f} ms"
    if seconds < 60:
        return f"{seconds:.2f} s"
    minutes, secs = divmod(int(round(seconds)), 60)
    if minutes < 60:
        return f"{minutes}m{secs:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"


def rate(per_s: Optional[float], unit: str = "samples") -> str:
    if per_s is None or not math.isfinite(per_s):
        return MISSING
    for scale, prefix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if per_s >= scale:
            return f"{per_s / scale:.1f}{prefix} {unit}/s"
    return f"{per_s:.1f} {unit}/s"


def gigabytes(value: Optional[float]) -> str:
    return MISSING if value is None else f"{value:.1f} GB"


def percent(value: Optional[float]) -> str:
    return MISSING if value is None else f"{value:.0f}%"


def celsius(value: Optional[float]) -> str:
    return MISSING if value is None else f"{value:.0f}°C"


def megabytes(value: Optional[float]) -> str:
    """Device memory as reported in MB: "812 MB", or "12.3 GB" from 1024 MB up."""
    if value is None or not math.isfinite(value):
        return MISSING
    return f"{value / 1024:.1f} GB" if value >= 1024 else f"{value:.0f} MB"
