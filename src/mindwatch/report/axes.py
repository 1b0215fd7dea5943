"""Each chart's axes, computed once here for the HTML page (``plot.js`` draws what it is given)
and the PNGs alike: log or linear, the ranges, and the ticks with their labels.

An axis is plain data, ``{"log", "x": [x0, x1], "y": [y0, y1], "x_ticks": [[x, label]],
"y_ticks": [[y, label]]}``; the y range is in axis units (log10 of the value on a log axis),
tick positions are values.
"""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from ..basics import format as fmt

# "auto" turns log on when the largest value is this many times the smallest: a spike of
# 1000x flattens a linear axis to nothing.
AUTO_LOG_RATIO = 30
PADDING = 0.05        # of the y span, above and below the data
MAX_DECADES = 8       # decade ticks on a log axis, at most
# A constant series (a flat LR of 0.01) gets an axis of its value +- this share of it: one
# padded by a fixed 0.5 put 0.01 on a -0.4..0.4 axis, where it read as 0.
FLAT_SPAN = 0.1


def nice_ticks(low: float, high: float, log: bool = False) -> list[float]:
    """Round ticks in [low, high]: 1, 2 or 5 times a power of ten apart. On a log axis
    ``low``/``high`` and the ticks are log10 values, decades when the axis spans one or more."""
    if log and high - low >= 1:
        stride = max(1, math.ceil((math.ceil(high) - math.floor(low)) / MAX_DECADES))
        return [e for e in range(math.floor(low), math.ceil(high) + 1, stride) if low <= e <= high]
    if log:
        return [math.log10(v) for v in nice_ticks(10 ** low, 10 ** high) if v > 0]
    raw = (high - low) / 5 or 1.0
    base = 10 ** math.floor(math.log10(raw))
    step = next(m * base for m in (1, 2, 5, 10) if m * base >= raw)
    return [i * step for i in range(math.ceil(low / step), math.floor(high / step) + 1)]


def tick_label(value: float, log: bool) -> str:
    """Decades on a log axis read as 0.01, 1000, 1e+6; other values to 3 digits."""
    if log:
        exponent = round(math.log10(value))
        if abs(10.0 ** exponent - value) <= 1e-9 * value:
            return fmt.decade(exponent)
    return fmt.number(value, 3)


def _wants_log(option: Any, finite: Sequence[float]) -> bool:
    if option is True:
        return True
    return option == "auto" and min(finite) > 0 and max(finite) / min(finite) > AUTO_LOG_RATIO


def panel_axis(panel: Mapping[str, Any]) -> dict[str, Any] | None:
    """The axes of one panel (``lines``, optional ``hlines``, ``log``: True, False or "auto",
    ``x_range``); None when no line has a finite value: nothing to draw."""
    finite = [v for line in panel["lines"] for v in line["y"] if math.isfinite(v)]
    if not finite:
        return None
    ys = finite + [h["y"] for h in panel.get("hlines") or ()]
    log = _wants_log(panel.get("log"), finite) and any(v > 0 for v in ys)
    if log:
        ys = [math.log10(v) for v in ys if v > 0]
    low, high = min(ys), max(ys)
    # flat: a decade around it on a log axis, else +-10% of it (+-0.5 around 0)
    pad = (high - low) * PADDING or (0.5 if log else abs(low) * FLAT_SPAN or 0.5)
    y0, y1 = low - pad, high + pad
    xs = panel.get("x_range") or [x for line in panel["lines"] for x in line["x"]]
    x0, x1 = min(xs), max(xs)
    x1 = x1 if x1 > x0 else x0 + 1
    y_values = [10 ** t if log else t for t in nice_ticks(y0, y1, log)]
    return {"log": log, "x": [x0, x1], "y": [y0, y1],
            "x_ticks": [[t, fmt.step(t)] for t in nice_ticks(x0, x1)],
            "y_ticks": [[v, tick_label(v, log)] for v in y_values]}
