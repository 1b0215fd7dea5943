"""Shape-keeping downsampling of (step, value) series for plots of long runs.

A plot a few thousand pixels wide cannot show a million points, but it must still show every
spike: averaging would hide exactly what a training monitor exists to reveal. So each bucket
of consecutive points keeps its minimum and its maximum (in their original order), and some
points are never dropped:

- the first and the last finite point (the curve spans the whole run),
- every point whose step is in ``keep`` (the steps that have an anomaly),
- non-finite values (NaN, +-inf): they are events, drawn as markers; a long run of the same
  non-finite value is reduced to its first and last point so a run that kept going on NaN
  losses still fits the budget.

``None`` (value not known) is dropped: there is nothing to draw.

Pure Python on purpose: the core has no third-party dependency, and the hot loops run in
C builtins (``min``, ``list.index``, slicing), about 0.1 s per million points.
"""
from __future__ import annotations

import math
from array import array
from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Sequence
from typing import cast

from ..settings import check_int

Series = tuple[list[float], list[float]]


def _nonfinite_class(value: float) -> int:
    return 0 if math.isnan(value) else (1 if value > 0 else -1)


def _thin(indices: list[int], budget: int) -> list[int]:
    """Evenly spaced subset of at most ``budget`` indices, first and last included."""
    if len(indices) <= budget:
        return indices
    if budget <= 1:
        return indices[:budget]
    stride = (len(indices) - 1) / (budget - 1)
    return sorted({indices[round(i * stride)] for i in range(budget)})


def _nonfinite_events(values: Sequence[float], indices: list[int]) -> list[int]:
    """First and last index of every run of the same non-finite class."""
    events: list[int] = []
    previous_index = previous_class = None
    for index in indices:
        cls = _nonfinite_class(values[index])
        if previous_index is None or index != previous_index + 1 or cls != previous_class:
            if previous_index is not None and events[-1] != previous_index:
                events.append(previous_index)          # close the previous run
            events.append(index)
        previous_index, previous_class = index, cls
    if previous_index is not None and events[-1] != previous_index:
        events.append(previous_index)
    return events


def _min_max(values: list[float], positions: Sequence[int], buckets: int) -> list[int]:
    """Positions of the min and max of each of ``buckets`` equal slices of ``values``."""
    chosen: list[int] = []
    count = len(values)
    for bucket in range(buckets):
        start = bucket * count // buckets
        stop = (bucket + 1) * count // buckets
        if start >= stop:
            continue
        chunk = values[start:stop]
        low = chunk.index(min(chunk))
        high = chunk.index(max(chunk))
        for offset in sorted({low, high}):
            chosen.append(positions[start + offset])
    return chosen


def _positions(steps: Sequence[float], known: Sequence[int], keep: set) -> list[int]:
    """Indices (among ``known``) whose step is in ``keep``; bisection when steps ascend."""
    if not keep:
        return []
    if isinstance(known, range) and list(steps) == sorted(steps):   # C speed, ~10 ns a step
        found: list[int] = []
        for step in keep:
            found.extend(range(bisect_left(steps, step), bisect_right(steps, step)))
        return found
    return [i for i in known if steps[i] in keep]


def downsample(steps: Sequence[float], values: Sequence[float | None], max_points: int,
               keep: Iterable[float] = (), *, keep_at: Iterable[int] = ()) -> Series:
    """At most ``max_points`` points of the series (more only when ``keep`` alone is larger).
    ``keep``: steps whose points stay; ``keep_at``: indices whose points stay (the same, found
    once for all the series of a rank, which share their steps).

    Returns ``(steps, values)`` as new lists, in the input order, ``None`` values left out.
    """
    check_int("max_points", max_points, minimum=2)
    if len(steps) != len(values):
        raise ValueError(f"steps and values differ in length: {len(steps)} != {len(values)}")
    # The common case (no None, all finite) stays in C loops: `in`, map, slicing; an array
    # (runlog.columns) holds no None at all.
    known: Sequence[int] = range(len(values)) if isinstance(values, array) or (
        None not in values) else [i for i, v in enumerate(values) if v is not None]
    # From here on values are read only at ``known`` indices (all of them when it is a range),
    # none of which holds None; the type checker cannot follow that, so say it once.
    numbers = cast("Sequence[float]", values)
    if len(known) <= max_points:
        return [steps[i] for i in known], [numbers[i] for i in known]
    # A finite float sum means no NaN and no inf (an inf term makes it inf or NaN); a sum that
    # overflows only sends the series down the slower, exact path.
    if isinstance(known, range) and math.isfinite(sum(numbers)):
        finite: Sequence[int] = known
        finite_values = numbers.tolist() if isinstance(numbers, array) else list(numbers)
        nonfinite = []
    else:
        finite = [i for i in known if math.isfinite(numbers[i])]
        nonfinite = [i for i in known if not math.isfinite(numbers[i])]
        finite_values = [numbers[i] for i in finite]
    forced = set(_positions(steps, known, set(keep)))
    forced.update(i for i in keep_at if numbers[i] is not None)
    if finite:
        forced.update((finite[0], finite[-1]))
    budget = max(max_points - len(forced), 0)
    # Non-finite events get at most a quarter of the budget: they are rare in a healthy run
    # and, when they are not, evenly spaced markers still show where they happened.
    events = _thin(_nonfinite_events(numbers, nonfinite), budget // 4) if nonfinite else []
    forced.update(events)
    budget = max(max_points - len(forced), 0)
    chosen = _min_max(finite_values, finite, budget // 2) if budget >= 2 else []
    picked = sorted(forced.union(chosen))
    return [steps[i] for i in picked], [numbers[i] for i in picked]
