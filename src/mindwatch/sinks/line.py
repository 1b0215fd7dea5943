"""One record as one run-log line, in bytes, as fast as strict JSON allows.

The standard ``json`` encoder takes ~3.9 us for a step record, most of a run-log write.
msgspec (``pip install 'mindwatch[fast]'``) takes ~0.3 us, but writes NaN and infinity as
``null``, which the run log forbids (they travel as the strings "NaN", "Infinity"). So msgspec
encodes only records whose floats are all finite and whose values are scalars or lists of
numbers and None (step records, almost always; the job log's per-rank bins, ``job_ranks``,
whose 6 lists of 16384 floats take the standard encoder ~16 ms); other nested values
(hardware devices, per-layer norms) and anything msgspec refuses go through
``records.encode``. Both produce strict JSON that decodes to the same record; the text may
differ in float spelling (``1e-05`` or ``1e-5``, ``1e+16`` or ``1e16``).
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .. import records

try:
    import msgspec
    _FAST: Any = msgspec.json.Encoder()
except ImportError:         # the standard encoder only
    _FAST = None

_LISTS = (list, tuple)


def _flat_and_finite(record: Mapping[str, Any]) -> bool:
    for value in record.values():
        kind = type(value)
        if kind is float:
            if value - value != 0.0:        # inf - inf and nan - nan are nan
                return False
        elif kind in _LISTS:
            if not _finite_numbers(value):
                return False
        elif kind is dict:
            return False
    return True


def _finite_numbers(values: list[Any] | tuple[Any, ...]) -> bool:
    """Whether ``values`` holds only finite numbers and None (falsy values of any kind too:
    they hold no number), checked in C: their sum is finite (NaN and infinities carry into
    it; a sum that overflows is refused too, which only costs the standard encoder), and
    anything else (a string, a dict, a list) makes it raise. ~0.1 ms for 16384 floats."""
    try:
        total = sum(filter(None, values))
        return bool(total - total == 0)
    except (TypeError, ValueError, ArithmeticError):
        return False


def encode_line(record: Mapping[str, Any]) -> bytes:
    """``record`` as one line of strict JSON, UTF-8, with its newline."""
    if _FAST is not None and _flat_and_finite(record):
        try:
            return _FAST.encode(record) + b"\n"
        except (TypeError, ValueError, OverflowError):
            pass                            # a type msgspec does not know: the standard way
    return (records.encode(record) + "\n").encode("utf-8")
