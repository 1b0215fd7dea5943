"""Argument checks that name the argument and what it accepts.

Every public entry point validates its arguments before training starts, with these helpers,
so a bad value fails with one readable message: ``TypeError`` for the wrong type,
``ValueError`` for a value out of range. ``bool`` is never accepted as a number.
"""
from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _shown(value: Any) -> str:
    """``value`` for a message: Python refuses to print ints of more than 4300 digits, and a
    long text would drown the message."""
    if isinstance(value, int) and value.bit_length() > 64:
        return f"{'-' if value < 0 else ''}an int of {value.bit_length()} bits"
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def check_int(name: str, value: Any, minimum: int | None = None,
              optional: bool = False, maximum: int | None = None) -> None:
    """``value`` must be an int (not a bool) within ``[minimum, maximum]``; ``None`` passes
    when ``optional``."""
    if value is None and optional:
        return
    if not _is_int(value):
        raise TypeError(f"{name} must be an int{' or None' if optional else ''}; "
                        f"got {type(value).__name__} {_shown(value)}")
    if minimum is not None and value < minimum:
        raise ValueError(f"{name} must be >= {minimum}; got {_shown(value)}")
    if maximum is not None and value > maximum:
        raise ValueError(f"{name} must be <= {maximum}; got {_shown(value)}")


def check_number(name: str, value: Any, *, low: float | None = None,
                 high: float | None = None, low_open: bool = False, high_open: bool = False,
                 optional: bool = False) -> None:
    """``value`` must be a finite int or float within ``[low, high]`` (``low_open`` /
    ``high_open`` exclude the bound); ``None`` passes when ``optional``."""
    if value is None and optional:
        return
    if not _is_number(value):
        raise TypeError(f"{name} must be a number{' or None' if optional else ''}; "
                        f"got {type(value).__name__} {_shown(value)}")
    try:
        finite = math.isfinite(value)
    except OverflowError:   # an int beyond every float: no computation could use it
        finite = False
    if not finite:
        raise ValueError(f"{name} must be finite; got {_shown(value)}")
    if low is not None and (value <= low if low_open else value < low):
        raise ValueError(f"{name} must be {'>' if low_open else '>='} {low}; "
                         f"got {_shown(value)}")
    if high is not None and (value >= high if high_open else value > high):
        raise ValueError(f"{name} must be {'<' if high_open else '<='} {high}; "
                         f"got {_shown(value)}")


def check_bool(name: str, value: Any) -> None:
    """``value`` must be ``True`` or ``False`` (not 0, 1 or a string)."""
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be True or False; got {type(value).__name__} "
                        f"{_shown(value)}")


def check_choice(name: str, value: Any, choices: Iterable[Any]) -> None:
    """``value`` must be one of ``choices`` (compared with ``==``; ``True`` never stands in
    for ``1``). Raises ``ValueError`` naming the argument and every accepted value."""
    options = tuple(choices)
    if not any(_same(value, choice) for choice in options):
        raise ValueError(f"{name} must be one of {', '.join(map(repr, options))}; "
                         f"got {_shown(value)}")


def _same(value: Any, choice: Any) -> bool:
    if isinstance(value, bool) != isinstance(choice, bool):
        return False
    try:
        return bool(value == choice)
    except Exception:       # an array's == answers element-wise, and its truth is ambiguous
        return False


def check_token(name: str, value: Any) -> None:
    """``value`` must be a non-empty string of printable characters without whitespace (a
    host name, an address)."""
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a str; got {type(value).__name__} {_shown(value)}")
    if not value or not value.isprintable() or any(c.isspace() for c in value):
        raise ValueError(f"{name} must be a non-empty string without whitespace; "
                         f"got {_shown(value)}")
