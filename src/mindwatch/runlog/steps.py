"""Where each step is in a rank's step column, for values "at step N" across ranks.

A step can be logged twice: a run resumed from a checkpoint logs again the steps after it.
Then the last record of a step is the one that counts, as in ``{step: record}`` built in file
order (which this replaces: a dict per step record of a long run is what the views no longer
build). A column whose steps strictly ascend, the usual case, needs no dict at all.
"""
from __future__ import annotations

from bisect import bisect_right
from collections.abc import Sequence
from itertools import islice
from operator import lt
from typing import Any


def _ascending(steps: Sequence[Any]) -> bool:
    try:
        return all(map(lt, steps, islice(steps, 1, None)))     # C speed, ~20 ns a step
    except TypeError:                                          # None, or a step of text
        return False


class StepIndex:
    """``ascending``: whether ``steps`` strictly ascend, when already known (``RankScan``)."""

    def __init__(self, steps: Sequence[Any], ascending: bool | None = None):
        self.steps = steps
        self.ascending = _ascending(steps) if ascending is None else ascending
        # step -> index of its last record, in the order each step first appears
        self._last: dict[Any, int] | None = None if self.ascending else {
            step: index for index, step in enumerate(steps)}

    def keys(self) -> set[Any]:
        return set(self.steps) if self._last is None else set(self._last)

    def position(self, step: Any) -> int:
        """The index of the last record of ``step``, which must be there."""
        if self._last is None:
            return bisect_right(self.steps, step) - 1
        return self._last[step]

    def index_of(self, step: Any) -> int | None:
        """The index of the last record of ``step``; None when it is not there."""
        if self._last is not None:
            return self._last.get(step)
        index = bisect_right(self.steps, step) - 1
        return index if index >= 0 and self.steps[index] == step else None

    def find(self, step: Any) -> int | None:
        """The index of the largest step <= ``step`` (ascending steps only)."""
        index = bisect_right(self.steps, step) - 1
        return index if index >= 0 else None

    def values(self, column: Sequence[Any]) -> Sequence[Any]:
        """``column``'s values, one per step (its last record), None left out."""
        if self._last is None:
            return column if None not in column else [v for v in column if v is not None]
        return [column[i] for i in self._last.values() if column[i] is not None]


def last_common_step(indexes: list[StepIndex]) -> Any:
    """The largest step that every rank logged; None when there is none."""
    if not all(index.ascending for index in indexes):
        common = set.intersection(*(index.keys() for index in indexes))
        return max(common) if common else None
    if not all(index.steps for index in indexes):
        return None
    candidate = min(index.steps[-1] for index in indexes)
    while True:       # lower the candidate to each rank's largest step at or below it
        for index in indexes:
            found = index.find(candidate)
            if found is None:
                return None
            if index.steps[found] != candidate:
                candidate = index.steps[found]
                break
        else:
            return candidate
