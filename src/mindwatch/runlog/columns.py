"""One field of many records as a column: an ``array`` of machine numbers (8 bytes a value)
while every value is a number of one type, else a plain list of the values as they are.

A list of 200,000 Python floats costs 32 bytes a value (the object and its pointer); a view
of 8 ranks x 200,000 steps x 7 fields would hold 360 MB that way, 90 MB as arrays. Values
keep their exact type either way: an int loss stays an int (a JSON number without a point),
None stays None, so ``column[i]`` is what the record held. A column of None only (a field
the run never logged: ``tokens_per_s`` without ``tokens_per_sample``) is ``Nones``, no
memory per value, until a value comes.
"""
from __future__ import annotations

from array import array
from collections.abc import Iterator, Sequence
from itertools import repeat
from operator import attrgetter, itemgetter
from typing import Any, overload

from ..records import FLOAT_FIELDS
from .fast import revive

FLOAT, INT = "d", "q"
_PLAIN = frozenset({float, int, bool, type(None)})   # values that revival leaves as they are
_TYPE = {FLOAT: float, INT: int}
_NONE = {type(None)}


class Nones(Sequence[None]):
    """``length`` values, every one None, in no memory per value."""

    __slots__ = ("length",)

    def __init__(self, length: int = 0):
        self.length = length

    def __len__(self) -> int:
        return self.length

    @overload
    def __getitem__(self, index: int) -> None: ...
    @overload
    def __getitem__(self, index: slice) -> list[None]: ...

    def __getitem__(self, index: int | slice) -> list[None] | None:
        if isinstance(index, slice):
            return [None] * len(range(self.length)[index])
        range(self.length)[index]              # IndexError where a list raises it
        return None

    def __iter__(self) -> Iterator[None]:
        return repeat(None, self.length)

    def __contains__(self, value: object) -> bool:
        return self.length > 0 and value is None

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Nones):
            return self.length == other.length
        return isinstance(other, (list, array)) and list(self) == list(other)

    def __repr__(self) -> str:
        return f"Nones({self.length})"


Column = Sequence[Any]                    # array("d"), array("q"), Nones or list


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
            if kinds <= _NONE and (isinstance(column, Nones) or not column):
                self.data[name] = Nones(len(column) + len(values))
                continue
            if not isinstance(column, list):
                column = self.data[name] = list(column)
            column.extend(values)
