"""One way to print numbers and units, shared by the console, the live view and the report
(its tables, tooltips and axis ticks, in the HTML page and the PNGs alike)."""
from __future__ import annotations

import math

from .units import MB_PER_DEVICE_GB

MISSING = "-"


def number(value: float | None, digits: int = 4) -> str:
    """``digits`` significant digits; exponent form outside [1e-3, 1e5)."""
    if value is None:
        return MISSING
    if not math.isfinite(value):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
    magnitude = abs(value)
    if magnitude != 0 and (magnitude >= 1e5 or magnitude < 1e-3):
        return f"{value:.{digits - 1}e}"
    return f"{value:.{digits}g}"


def count(n: int, noun: str, plural: str | None = None) -> str:
    """"1 step", "2 steps", "0 steps": the noun agrees with the number. ``plural`` for the
    nouns that do not just take an "s" ("ANOMALY", "ANOMALIES")."""
    return f"{n} {noun if n == 1 else plural or noun + 's'}"


def decade(exponent: int) -> str:
    """10 ** exponent as people write it: 0.001 ... 100000, then 1e+6 or 1e-4."""
    if -3 <= exponent <= 5:
        return f"{10.0 ** exponent:.{max(0, -exponent)}f}"
    return f"1e{exponent:+d}"


def step(value: float) -> str:
    """A position on the step axis: 1200, or 2.5 between the steps of a short run."""
    return str(int(value)) if value == int(value) else f"{value:g}"


def lr(value: float | None) -> str:
    return MISSING if value is None else f"{value:.2e}"


def duration(seconds: float | None) -> str:
    """Human duration: 45.2 ms, 3.10 s, 2m05s, 1h02m, 5d16h."""
    if seconds is None or not math.isfinite(seconds):
        return MISSING
    if seconds < 1.0:
        return f"{seconds * 1000:.1f} ms"
    if seconds < 60:
        return f"{seconds:.2f} s"
    minutes, secs = divmod(round(seconds), 60)
    if minutes < 60:
        return f"{minutes}m{secs:02d}s"
    hours, minutes = divmod(minutes, 60)
    if hours < 48:
        return f"{hours}h{minutes:02d}m"
    days, hours = divmod(hours + (minutes >= 30), 24)
    return f"{days}d{hours:02d}h"


def memory_rate(per_s: float, unit: str) -> str:
    """A rate of memory in ``unit`` ("GB" or device "MB") per second, in the unit and period
    that read best: "9.6 GB/min", "1.02 GB/day", "250 MB/h"."""
    if unit == "MB" and abs(per_s) * 3600 >= MB_PER_DEVICE_GB:
        per_s, unit = per_s / MB_PER_DEVICE_GB, "GB"
    for seconds, period in ((1, "s"), (60, "min"), (3600, "h")):
        if abs(per_s) * seconds >= 1:
            return f"{per_s * seconds:.3g} {unit}/{period}"
    return f"{per_s * 86400:.3g} {unit}/day"


def rate(per_s: float | None, unit: str = "samples") -> str:
    if per_s is None or not math.isfinite(per_s):
        return MISSING
    for scale, prefix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if per_s >= scale:
            return f"{per_s / scale:.1f}{prefix} {unit}/s"
    return f"{per_s:.1f} {unit}/s"


def token_rate(tokens_per_s: float | None, mfu: float | None = None) -> str:
    """"12.3k tok/s MFU 41.2%", or "12.3k tok/s" without an MFU (no ``peak_tflops``)."""
    text = rate(tokens_per_s, "tok")
    return text + (f" MFU {fraction_percent(mfu)}" if mfu is not None else "")


def fraction_percent(value: float | None) -> str:
    """A fraction as a percentage with one decimal: 0.4123 -> "41.2%" (MFU)."""
    if value is None or not math.isfinite(value):
        return MISSING
    return f"{value * 100:.1f}%"


def gigabytes(value: float | None) -> str:
    return MISSING if value is None else f"{value:.1f} GB"


def percent(value: float | None) -> str:
    return MISSING if value is None else f"{value:.0f}%"


def celsius(value: float | None) -> str:
    return MISSING if value is None else f"{value:.0f}°C"


def megabytes(value: float | None) -> str:
    """Device memory as reported in MB: "812 MB", or "12.3 GB" from 1024 MB up."""
    if value is None or not math.isfinite(value):
        return MISSING
    if value >= MB_PER_DEVICE_GB:
        return f"{value / MB_PER_DEVICE_GB:.1f} GB"
    return f"{value:.0f} MB"
