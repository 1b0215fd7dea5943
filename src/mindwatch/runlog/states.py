"""A rank's ``state`` records as columns, for the report's heatmaps: the steps, and per
quantity (``update_ratio``, ``max_logit``...) one float array per layer or sub-Cell, aligned
with the steps. A million-step run at the default interval has 10k state records: with 100
layers and nine quantities that is ~70 MB of arrays, not ~1 GB of dicts.
"""
from __future__ import annotations

import math
from array import array
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..basics.numbers import to_number
from ..records import State

# Where a record lacks a value (a layer added later, a cell a state step did not run). The
# fields it stands in for are norms, ratios and maxima: -inf is never one of their values.
ABSENT = -math.inf


@dataclass
class StateColumns:
    steps: array = field(default_factory=lambda: array("q"))
    series: dict[str, dict[str, array]] = field(default_factory=dict)  # quantity -> name ->

    def __len__(self) -> int:
        return len(self.steps)

    def add(self, record: Mapping[str, Any]) -> None:
        step = record.get(State.STEP)
        if type(step) is not int:
            return
        position = len(self.steps)
        self.steps.append(step)
        for group in (State.LAYERS, State.ACTIVATIONS):
            entries = record.get(group)
            if not isinstance(entries, Mapping):
                continue
            for name, fields in entries.items():
                if not isinstance(fields, Mapping):
                    continue
                for quantity, value in fields.items():
                    number = to_number(value)
                    if number is None:
                        continue
                    names = self.series.setdefault(str(quantity), {})
                    column = names.get(name)
                    if column is None:
                        column = names[name] = array("d")
                    if len(column) < position:
                        column.extend([ABSENT] * (position - len(column)))
                    if len(column) == position:         # a repeated name keeps its first
                        column.append(number)

    def column(self, quantity: str, name: str) -> array:
        """The values of ``name``'s ``quantity``, one per state record (ABSENT padded)."""
        values = self.series[quantity][name]
        if len(values) < len(self.steps):
            values.extend([ABSENT] * (len(self.steps) - len(values)))
        return values
