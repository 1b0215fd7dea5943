"""One conversion of "a number from somewhere" to a Python float, for every place that takes
numbers from outside: the monitor's inputs (tensors, numpy scalars), probes, and records read
back from a run log.

``to_number(value)``:

- ``None`` -> ``None`` (unknown stays unknown);
- ``bool`` (numpy's too) -> not a number (a flag such as ``skipped`` is never plotted as 0/1
  by accident);
- ``str`` -> only the run log's spellings ``"NaN"``, ``"Infinity"``, ``"-Infinity"`` are
  numbers (a record read back maps like one fresh from the monitor); other text is not;
- anything with ``__float__`` (int, float, numpy scalar, 0-d tensor) -> ``float(value)``,
  non-finite values kept; one that cannot be converted (or overflows) is not a number.

"Not a number" is ``None``, or, when ``name`` is given, a ``TypeError`` naming the argument.
"""
from __future__ import annotations

import math
from typing import Any

# The run log's spellings of non-finite numbers (strict JSON has none of its own).
NONFINITE_TEXT = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}


def to_number(value: Any, name: str | None = None) -> float | None:
    if value is None:
        return None
    if isinstance(value, str):
        number = NONFINITE_TEXT.get(value)
    elif isinstance(value, (bool, bytes, bytearray)) or _is_numpy_bool(value):
        number = None
    else:
        try:
            number = float(value)
        except (TypeError, ValueError, OverflowError):
            number = None
    if number is None and name is not None:
        raise TypeError(f"{name} must be a number or None; got {type(value).__name__} "
                        f"{value!r:.80}")
    return number


def _is_numpy_bool(value: Any) -> bool:
    return getattr(getattr(value, "dtype", None), "kind", None) == "b"
