"""Robust statistics: median and MAD, which the very outliers they should reveal cannot drag."""
from __future__ import annotations

from collections.abc import Iterable, Sequence
from statistics import median

# The MAD of normally distributed data times this is its standard deviation (1 / Phi^-1(3/4)).
MAD_TO_SIGMA = 1.4826


def robust_sigma(values: Iterable[float], center: float) -> float:
    """Standard deviation estimated from the median absolute deviation around ``center``."""
    return MAD_TO_SIGMA * median(abs(v - center) for v in values)


def robust_z(value: float, window: Sequence[float], center: float | None = None
             ) -> float | None:
    """Robust z-score of ``value`` against ``window``; None if the window is flat.
    ``center``: the window's median, when the caller already has it."""
    if center is None:
        center = median(window)
    sigma = robust_sigma(window, center)
    if sigma == 0:
        return None
    return (value - center) / sigma
