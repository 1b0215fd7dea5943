"""The spread of a value across ranks: its min, median and max, finite values only (a NaN on
one rank is an anomaly of that rank, not a point of the spread). Where each rank's own value
is shown (``rank_spread``: the summary's loss at a step), a rank whose value is not finite is
named beside the spread, not left out of it in silence."""
from __future__ import annotations

import math
from array import array
from collections.abc import Iterable, Mapping, Sequence
from operator import itemgetter
from typing import Any, TypeGuard, cast

from ..basics import format as fmt
from ..records import to_strict

STATS = ("min", "median", "max")
NONFINITE = "nonfinite"
_BLOCK = 8192


def _median_of_sorted(row: Sequence[float]) -> float:
    middle = len(row) // 2
    return row[middle] if len(row) % 2 else (row[middle - 1] + row[middle]) / 2


def _finite(value: float | None) -> TypeGuard[float]:
    return value is not None and math.isfinite(value)


def min_median_max(values: Iterable[float | None]) -> dict[str, float] | None:
    """``{"min", "median", "max"}`` of the finite values; None when there is none."""
    row = sorted(v for v in values if _finite(v))
    return dict(zip(STATS, _stats(row), strict=True)) if row else None


def rank_spread(values: Mapping[int, float | None]) -> dict[str, Any] | None:
    """``values``: each rank's value. ``{"min", "median", "max"}`` of the finite ones (each
    None when none is), and ``"nonfinite"``: ``{rank: "NaN" | "Infinity" | "-Infinity"}``
    for each rank whose value is not finite (the rank as a str, as JSON keys are; empty
    when there is none). None when no rank has a value."""
    bad = {str(rank): to_strict(value) for rank, value in values.items()
           if isinstance(value, float) and not math.isfinite(value)}
    stats = min_median_max(values.values())
    if stats is None and not bad:
        return None
    return {**(stats or dict.fromkeys(STATS)), NONFINITE: bad}


def spread_text(spread: Mapping[str, Any]) -> str:
    """"min/median/max 2/2.2/2.4", then the ranks whose value is not finite: "min/median/max
    2/2.2/2.4, nan on rank 1"; "nan on ranks 0, 1" when none is finite (``rank_spread``)."""
    finite = spread[STATS[0]] is not None
    text = ("min/median/max " + "/".join(fmt.number(spread[s]) for s in STATS)
            if finite else "")
    by_value: dict[str, list[str]] = {}
    for rank, value in spread.get(NONFINITE, {}).items():
        by_value.setdefault(fmt.number(float(value)), []).append(rank)
    bad = ", ".join(f"{value} on rank{'s' if len(ranks) > 1 else ''} {', '.join(ranks)}"
                    for value, ranks in by_value.items())
    return ", ".join(part for part in (text, bad) if part)


def _stats(row: Sequence[float]) -> tuple[float, float, float]:
    return row[0], _median_of_sorted(row), row[-1]


def per_step(steps: Sequence[Sequence[float]], values: Sequence[Sequence[float | None]]
             ) -> tuple[Sequence[float], dict[str, list[float]]]:
    """Each step's spread across ranks: ``steps[r]``/``values[r]`` are rank r's columns.
    Returns the steps (ascending) and ``{stat: one value per step}``."""
    first = steps[0]
    if all(column == first for column in steps) and all(
            (isinstance(column, array) or None not in column)
            and math.isfinite(sum(cast("Sequence[float]", column))) for column in values):
        # Usual case, same steps everywhere and all finite: whole columns through C builtins,
        # a block of steps at a time (a sorted row per step is ~300 bytes).
        stats: dict[str, list[float]] = {stat: [] for stat in STATS}
        for start in range(0, len(first), _BLOCK):
            rows = list(map(sorted, zip(*(column[start:start + _BLOCK] for column in values),
                                        strict=True)))
            for stat, column in zip(STATS, _columns(rows, len(values)), strict=True):
                stats[stat] += column
        return first, stats
    by_step: dict[float, list[float]] = {}
    for rank_steps, rank_values in zip(steps, values, strict=True):
        for step, value in zip(rank_steps, rank_values, strict=True):
            if _finite(value):
                by_step.setdefault(step, []).append(value)
    at = sorted(by_step)
    rows = [sorted(by_step[step]) for step in at]
    columns = list(zip(*map(_stats, rows), strict=True)) if rows else [(), (), ()]
    return at, {stat: list(column) for stat, column in zip(STATS, columns, strict=True)}


def _columns(rows: list[list[float]], width: int) -> tuple[list[float], ...]:
    """min, median, max of sorted rows of ``width`` values, as ``_stats`` gives them."""
    middle = width // 2
    if width % 2:
        medians = list(map(itemgetter(middle), rows))
    else:
        medians = [(low + high) / 2 for low, high in map(itemgetter(middle - 1, middle), rows)]
    return list(map(itemgetter(0), rows)), medians, list(map(itemgetter(-1), rows))
