"""One record as one run-log line, in bytes, as fast as strict JSON allows.

The standard ``json`` encoder takes ~3.9 us for a step record, most of a run-log write.
msgspec (``pip install 'mindwatch[fast]'``) takes ~0.3 us, but writes NaN and infinity as
``null``, which the run log forbids (they travel as the strings "NaN", "Infinity"). So msgspec
encodes only flat records whose floats are all finite (step records, almost always); nested
values (hardware devices, per-layer norms, group LRs) and anything msgspec refuses go
through ``records.encode``. Both produce strict JSON that decodes to the same record; the
text may differ in float spelling (``1e-05`` or ``1e-5``).
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

_NESTED = (dict, list, tuple)


def _flat_and_finite(record: Mapping[str, Any]) -> bool:
    for value in record.values():
        kind = type(value)
        if kind is float:
            if value - value != 0.0:        # inf - inf and nan - nan are nan
                return False
        elif kind in _NESTED:
            return False
    return True


def encode_line(record: Mapping[str, Any]) -> bytes:
    """``record`` as one line of strict JSON, UTF-8, with its newline."""
    if _FAST is not None and _flat_and_finite(record):
        try:
            return _FAST.encode(record) + b"\n"
        except (TypeError, ValueError, OverflowError):
            pass                            # a type msgspec does not know: the standard way
    return (records.encode(record) + "\n").encode("utf-8")
