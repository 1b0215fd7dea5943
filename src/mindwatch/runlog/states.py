"""A rank's ``state`` records as columns, for the report's heatmaps: the steps, and per
quantity (``update_ratio``, ``max_logit``...) one float array per layer or sub-Cell, aligned
with the steps. A million-step run at the default interval has 10k state records: with 100
layers and nine quantities that is ~70 MB of arrays, not ~1 GB of dicts.

A state record holds a few hundred layers' norms; taken value by value, a run's records cost
seconds of Python. So a record whose layers all carry the same fields, in the same order,
each quantity's values all floats (or all null), is taken a row at a time: each quantity's
values of the record, in layer order, go into one array in C (``_Rows``), and consecutive
records of the same layers make one block, cut into the layers' columns in C when the
columns are read (``array[i::n]``). Any other record (a NaN, a layer without moments, an
int) is taken value by value, as before: the columns, and the order in which quantities and
layers first appear, are the same either way.
"""
from __future__ import annotations

import math
from array import array
from collections.abc import Mapping
from operator import itemgetter
from typing import Any

from ..basics.numbers import to_number
from ..records import State

# Where a record lacks a value (a layer added later, a cell a state step did not run). The
# fields it stands in for are norms, ratios and maxima: -inf is never one of their values.
ABSENT = -math.inf
_FLOATS, _NULLS, _DICTS = {float}, {type(None)}, {dict}


class _Rows:
    """Consecutive records' values of one quantity, row by row (a row: ``names``' values)."""

    def __init__(self, names: tuple[str, ...], start: int):
        self.names, self.start, self.stop = names, start, start
        self.values = array("d")


class StateColumns:
    def __init__(self) -> None:
        self.steps = array("q")
        self._series: dict[str, dict[str, array]] = {}
        self._rows: dict[str, _Rows] = {}          # quantity -> rows not in its columns yet

    @property
    def series(self) -> dict[str, dict[str, array]]:
        """quantity -> name -> its column (ABSENT where a record had no value, up to the
        last value the name has; ``column`` pads it to every record)."""
        self.flush()
        return self._series

    def __len__(self) -> int:
        return len(self.steps)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, StateColumns):
            return NotImplemented
        return self.steps == other.steps and self.series == other.series

    def __repr__(self) -> str:
        return f"StateColumns(steps={self.steps!r}, series={self.series!r})"

    def __getstate__(self) -> dict[str, Any]:
        self.flush()                               # a worker hands back plain columns
        return self.__dict__

    def add(self, record: Mapping[str, Any]) -> None:
        step = record.get(State.STEP)
        if type(step) is not int:
            return
        position = len(self.steps)
        self.steps.append(step)
        layers = record.get(State.LAYERS)
        if not (type(layers) is dict and self._add_rows(layers, position)):
            self._add_values(layers, position)
        self._add_values(record.get(State.ACTIVATIONS), position)

    def _add_rows(self, entries: dict[str, Any], position: int) -> bool:
        """The record's layers a row per quantity, when they allow it (module docstring);
        False, nothing done, when they do not."""
        fields = list(entries.values())
        # every layer an object of the same fields in the same order (checked in C)
        if not fields or set(map(type, fields)) != _DICTS or len(set(map(tuple, fields))) != 1:
            return False
        quantities = tuple(fields[0])
        rows = []
        for quantity in quantities:
            values = list(map(itemgetter(quantity), fields))
            kinds = set(map(type, values))
            if kinds == _FLOATS:
                rows.append((quantity, values))
            elif kinds != _NULLS:               # all null: no value, as value by value
                return False
        names = tuple(entries)
        for quantity, values in rows:
            block = self._rows.get(quantity)
            if block is None or block.names != names or block.stop != position:
                self._flush(quantity)
                block = self._rows[quantity] = _Rows(names, position)
                self._series.setdefault(quantity, {})   # it appears now, as value by value
            block.values.fromlist(values)
            block.stop = position + 1
        return True

    def _add_values(self, entries: Any, position: int) -> None:
        if not isinstance(entries, Mapping):
            return
        series, pending = self._series, self._rows
        for name, fields in entries.items():
            if not isinstance(fields, Mapping):
                continue
            for quantity, value in fields.items():
                number = value if type(value) is float else to_number(value)
                if number is None:
                    continue
                if quantity in pending:
                    self._flush(quantity)       # its earlier records' rows first, in order
                names = series.setdefault(str(quantity), {})
                column = names.get(name)
                if column is None:
                    column = names[name] = array("d")
                if len(column) < position:
                    column.extend([ABSENT] * (position - len(column)))
                if len(column) == position:         # a repeated name keeps its first
                    column.append(number)

    def _flush(self, quantity: str) -> None:
        """Cut a quantity's pending rows into its layers' columns."""
        block = self._rows.pop(quantity, None)
        if block is None:
            return
        names, width = self._series[quantity], len(block.names)
        for index, name in enumerate(block.names):
            column = names.get(name)
            if column is None:
                column = names[name] = array("d")
            if len(column) < block.start:
                column.extend([ABSENT] * (block.start - len(column)))
            column.extend(block.values[index::width])

    def flush(self) -> None:
        """Every pending row into the columns. The reader calls it after each chunk, so
        the rows of a run's records never stand beside their columns in memory."""
        for quantity in list(self._rows):
            self._flush(quantity)

    def column(self, quantity: str, name: str) -> array:
        """The values of ``name``'s ``quantity``, one per state record (ABSENT padded)."""
        values = self.series[quantity][name]
        if len(values) < len(self.steps):
            values.extend([ABSENT] * (len(self.steps) - len(values)))
        return values
