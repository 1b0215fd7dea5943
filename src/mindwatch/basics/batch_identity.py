"""A batch's identity (the ``batch`` of an anomaly, the key of ``bad_batches.jsonl``): a
fingerprint of its content alone, the same on every run and every rank for the same samples,
whatever their order in the data and within the batch.

Where the batch is (a protected step on the device, a host array), each input tensor gives
``NUMBERS_PER_INPUT`` float32 numbers: the sum and the sum of squares of its finite elements,
how many are not finite, and how many there are. Sums do not depend on the samples' order, and
a batch poisoned with NaN still has a fingerprint of its own (its non-finite count; NaN itself
would never compare equal). The fingerprint is those numbers to ``DIGITS`` significant digits,
hashed. The sums are accumulated in float64 and rounded once to float32 (where the device
has no float64, MPS, in float32): a float32 accumulation of the same elements in another
order (another kernel's reduction tree, the samples shuffled within the batch) differs by
about 1e-7 of the terms' magnitude, which is the 4th digit of a sum that cancels (zero-mean
inputs), while float64's error stays far below the 6th. (Two sums on either side of a
rounding boundary would differ: rare, and such a batch is then met as a new one, never a
wrong one.)
"""
from __future__ import annotations

import hashlib
import math
from collections.abc import Iterable, Sequence
from typing import Any

NUMBERS_PER_INPUT = 4
DIGITS = 6
FINGERPRINT = "fingerprint"
INDICES = "indices"


def fingerprint(numbers: Iterable[float]) -> str:
    """The hex fingerprint (16 digits) of a batch's ``numbers``, input after input."""
    text = ",".join(_rounded(float(value)) for value in numbers)
    return hashlib.sha1(text.encode()).hexdigest()[:16]


def _rounded(value: float) -> str:
    if not math.isfinite(value):        # a float32 sum that overflowed
        return str(value)
    return f"{value:.{DIGITS - 1}e}"


def host_numbers(arrays: Iterable[Any]) -> list[float]:
    """The numbers of a batch held on the host (numpy arrays, or what ``numpy.asarray``
    takes), computed as the device computes them: the values in float32, their sums
    accumulated in float64 and rounded to float32."""
    import numpy as np

    found: list[float] = []
    for array in arrays:
        values = np.asarray(array).astype(np.float32, copy=False).reshape(-1)
        finite = np.isfinite(values)
        kept = np.where(finite, values, np.float32(0.0))
        wide = kept.astype(np.float64)      # accumulated exactly, rounded once to float32
        found += [float(np.float32(wide.sum())), float(np.float32((wide * wide).sum())),
                  float(values.size - int(finite.sum())), float(values.size)]
    return found


def identity(numbers: Iterable[float], indices: Sequence[int] | None = None
             ) -> dict[str, Any]:
    """The ``batch`` field of a record: its fingerprint and, where the data pipeline gives
    them, the samples' indices (None: not known)."""
    return {FINGERPRINT: fingerprint(numbers),
            INDICES: None if indices is None else [int(i) for i in indices]}


def host_array(value: Any) -> Any:
    """An input as a numpy array of numbers (MindSpore and PyTorch tensors, what
    ``numpy.asarray`` takes); None for one that holds none (strings), which a batch's
    identity leaves out. bfloat16 goes through its float32 values."""
    import numpy as np

    try:
        if hasattr(value, "asnumpy"):                               # MindSpore
            array = value.asnumpy()
            if array.dtype.kind == "V" and hasattr(value, "float"):
                array = value.float().asnumpy()     # bfloat16 (ml_dtypes'): its float32 values
        elif hasattr(value, "detach"):                              # PyTorch
            array = value.detach().float().cpu().numpy()
        else:
            array = np.asarray(value)
    except (TypeError, ValueError, RuntimeError):
        return None
    return array if array.dtype.kind in "biuf" else None


def batch_fingerprint(*inputs: Any) -> str:
    """The fingerprint a run gives a batch of these inputs (``bad_batches.jsonl``'s
    ``fingerprint``), in the order the step takes them (MindSpore: the dataset's columns; a
    PyTorch model: its forward's tensor arguments, positional then keyword by name). Takes
    numpy arrays, MindSpore or PyTorch tensors: to find a ledger's batch in the data where
    its samples' indices are not known, fingerprint the batches in the data's order."""
    return fingerprint(host_numbers(
        [array for array in map(host_array, inputs) if array is not None]))
