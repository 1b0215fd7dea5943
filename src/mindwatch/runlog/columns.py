"""One field of many records as a column: an ``array`` of machine numbers (8 bytes a value)
while every value is a number of one type, else a plain list of the values as they are.

A list of 200,000 Python floats costs 32 bytes a value (the object and its pointer); a view
of 8 ranks x 200,000 steps x 7 fields would hold 360 MB that way, 90 MB as arrays. Values
keep their exact type either way: an int loss stays an int (a JSON number without a point),
None stays None, so ``column[i]`` is what the record held.
"""
from __future__ import annotations

from array import array
from collections.abc import Sequence
from operator import attrgetter, itemgetter
from typing import Any

from ..records import FLOAT_FIELDS
from .fast import revive

Column = Sequence[Any]                    # array("d"), array("q") or list
FLOAT, INT = "d", "q"
_PLAIN = frozenset({float, int, bool, type(None)})   # values that revival leaves as they are
_TYPE = {FLOAT: float, INT: int}


def field_values(items: list[Any], name: str) -> list[Any]:
    """``name`` of each record: msgspec Structs, dicts (``.get``: None when absent) or both."""
    if not items:
        return []
    try:
        if type(items[0]) is dict:
            return list(map(itemgetter(name), items))
        return list(map(attrgetter(name), items))
    except (KeyError, AttributeError, TypeError):
        return [item.get(name) if type(item) is dict else getattr(item, name)
                for item in items]


def revived(values: list[Any], name: str) -> tuple[list[Any], set[type]]:
    """The values of field ``name`` as ``records.decode`` gives them ("NaN" -> nan in a float
    field), and their types; the list itself when nothing needs reviving (the usual case,
    checked in C)."""
    kinds = set(map(type, values))
    if kinds <= _PLAIN:
        return values, kinds
    numeric = name in FLOAT_FIELDS
    values = [revive(value, numeric) for value in values]
    return values, set(map(type, values))


class Columns:
    """Columns being filled, batch by batch: ``typecodes`` names each column's array type
    (FLOAT or INT); a column leaves its array for a list at the first value of another type."""

    def __init__(self, typecodes: dict[str, str]):
        self.typecodes = typecodes
        self.data: dict[str, Column] = {name: array(code) for name, code in typecodes.items()}

    def extend(self, items: list[Any]) -> None:
        for name, code in self.typecodes.items():
            values, kinds = revived(field_values(items, name), name)
            column = self.data[name]
            if isinstance(column, array) and kinds <= {_TYPE[code]}:
                try:
                    column.fromlist(values)    # all or nothing
                    continue
                except OverflowError:          # an int beyond 64 bits
                    pass
            if isinstance(column, array):
                column = self.data[name] = column.tolist()
            column.extend(values)              # type: ignore[attr-defined]
