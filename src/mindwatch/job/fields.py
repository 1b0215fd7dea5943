"""What the job log holds of each step, and how each field is reduced across ranks: declared
once, here, as OLMo-core's ``record_metric(..., reduce_type=...)`` declares it.

Every rank puts its own value of each field into its row of the ranks' exchange (one float32
per field, plus a mask of the fields it knows and a mask of the anomaly kinds it found at the
step: ``row``); the exchange's SUM all-reduce gathers every rank's row (ranks/consensus.py),
and rank 0 reduces the rows into the ``job_step`` record (``reduce``) and the heatmap's bins
(job/rank_bins.py), with numpy over all ranks at once: no loop over ranks in Python.

Reductions: ``MEAN`` and ``MAX`` give one number (a non-finite value on any rank wins: the
job's loss is NaN when a rank's is); ``SPREAD`` gives the finite values' min, median and
max with the rank of each extreme, and the ranks whose value was not finite. ``bin``: how a
field's per-rank values are kept over a bin of steps for the heatmap (MEAN, MAX, or None:
not kept).
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..anomaly import ANOMALY_KINDS
from ..basics.medians import medians as row_medians
from ..basics.rank_set import rank_set
from ..job_schema import JobStep, Spread
from ..records import Device, FrameworkMemory, Hardware, Step

if TYPE_CHECKING:
    import numpy as np

MEAN, MAX, SPREAD = "mean", "max", "spread"


@dataclass(frozen=True)
class JobField:
    name: str                  # the job_step field, and the rank's step-record field it reads
    reduce: str                # MEAN, MAX or SPREAD across ranks, each step
    bin: str | None = None     # MEAN or MAX over a bin of steps, per rank (the heatmap)


JOB_FIELDS = (
    JobField(JobStep.LOSS, MEAN),                  # each rank's loss is its own batch's
    JobField(JobStep.GRAD_NORM, MAX),              # after the reduction: equal under DP
    JobField(JobStep.STEP_TIME_S, SPREAD, bin=MEAN),
    JobField(JobStep.DATA_TIME_S, SPREAD, bin=MEAN),
    JobField(JobStep.LOCAL_GRAD_NORM, SPREAD, bin=MAX),
    JobField(JobStep.MEMORY_MB, SPREAD, bin=MAX),  # the latest hardware sample's
)
NAMES = tuple(field.name for field in JOB_FIELDS)
# A row: the fields, then the mask of known fields, the mask of the anomaly kinds found at
# the step, the mask of those found after the previous step's exchange (LATE: job_log.py),
# withheld (0/1). Masks are sums of powers of two below 2**24: exact in float32.
KNOWN, KINDS, LATE, SKIPPED = (len(JOB_FIELDS) + offset for offset in range(4))
WIDTH = len(JOB_FIELDS) + 4
assert len(JOB_FIELDS) <= 24 and len(ANOMALY_KINDS) <= 24


def memory_mb(hardware: Mapping[str, Any] | None, device: int | None) -> float | None:
    """This rank's memory, MB of 2**20 bytes, from its latest hardware record: what the
    framework allocated, else its device's memory in use, else its process's RSS (CPU)."""
    if not hardware:
        return None
    framework = hardware.get(Hardware.FRAMEWORK_MEMORY)
    if isinstance(framework, Mapping) and framework.get(FrameworkMemory.ALLOCATED_MB) is not None:
        return float(framework[FrameworkMemory.ALLOCATED_MB])
    for entry in hardware.get(Hardware.DEVICES) or ():
        if isinstance(entry, Mapping) and entry.get(Device.INDEX) == device \
                and entry.get(Device.MEM_USED_MB) is not None:
            return float(entry[Device.MEM_USED_MB])
    rss = hardware.get(Hardware.RSS_GB)
    return None if rss is None else float(rss) * 1e9 / 2 ** 20


def row(step: Mapping[str, Any] | None, memory: float | None, kinds: Iterable[str],
        late: Iterable[str] = ()) -> np.ndarray:
    """This rank's row of the exchange: its ``step`` record's fields, ``memory`` (MB), the
    anomaly ``kinds`` it found at the step, and those it found after the previous step's
    exchange (``late``)."""
    import numpy as np

    values = np.zeros(WIDTH, np.float32)
    known = 0
    for index, name in enumerate(NAMES):
        value = memory if name == JobStep.MEMORY_MB else (step or {}).get(name)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            values[index] = value
            known |= 1 << index
    values[KNOWN] = known
    values[KINDS], values[LATE] = _mask(kinds), _mask(late)
    values[SKIPPED] = float(bool((step or {}).get(Step.SKIPPED)))
    return values


def _mask(kinds: Iterable[str]) -> int:
    return sum(1 << ANOMALY_KINDS.index(kind) for kind in set(kinds) if kind in ANOMALY_KINDS)


def known_mask(rows: np.ndarray) -> np.ndarray:
    """(ranks, fields) booleans: which rank knew which field (read-only: when every rank
    knew the same fields, the common case, one row broadcast over the ranks)."""
    import numpy as np

    bits, fields = rows[:, KNOWN], np.arange(len(JOB_FIELDS))
    if len(bits) and bool((bits == bits[0]).all()):
        return np.broadcast_to((int(bits[0]) >> fields) & 1 == 1, (len(bits), len(fields)))
    # (fields, ranks), transposed: each field's column is contiguous, and the shifts run
    # over the ranks (a (ranks, 6) broadcast costs 3x as much, at 6 values per inner loop)
    return ((bits.astype(np.int64) >> fields[:, None]) & 1 == 1).T


def kinds_of(rows: np.ndarray, slot: int = KINDS) -> dict[str, np.ndarray]:
    """Each anomaly kind found at the step (``slot`` LATE: after the previous step's
    exchange) -> the ranks (ascending) that found it."""
    import numpy as np

    # the few ranks with a mask found in one pass over the column; only theirs decoded
    found = np.flatnonzero(rows[:, slot])
    bits = rows[found, slot].astype(np.int64)
    if not bits.any():
        return {}
    union = int(np.bitwise_or.reduce(bits))
    return {kind: found[bits >> index & 1 == 1]
            for index, kind in enumerate(ANOMALY_KINDS) if union >> index & 1}


def late_kinds_of(rows: np.ndarray) -> dict[str, np.ndarray]:
    return kinds_of(rows, LATE)


def reduce(rows: np.ndarray) -> dict[str, Any]:
    """The ``job_step`` fields of one step from every rank's row (rank order)."""
    import numpy as np

    # Each field's values in a contiguous row, from one pass over the ranks' rows: a column
    # read straight from them (WIDTH float32 apart) pulls the whole exchange through the
    # cache on every pass, and a SPREAD takes several (~3x the time at 16384 ranks).
    columns = np.ascontiguousarray(rows[:, :len(JOB_FIELDS)].T)
    spreads = columns[_SPREADS]
    record: dict[str, Any]
    if bool((rows[:, KNOWN] == _EVERY_FIELD).all()) and bool(np.isfinite(spreads).all()):
        record = _reduce_every_rank(np, columns, spreads)
    else:
        known = known_mask(rows)
        record = {}
        for index, field in enumerate(JOB_FIELDS):
            column, mask = columns[index], known[:, index]
            if not mask.any():
                record[field.name] = None
            elif field.reduce == SPREAD:
                record[field.name] = _spread(column, mask)
            else:
                record[field.name] = _one(field, column[mask].astype(np.float64))
    touched = np.flatnonzero(rows[:, KINDS])
    record[JobStep.SKIPPED] = bool(rows[:, SKIPPED].any())
    record[JobStep.RANKS] = rank_set(touched.tolist()) if len(touched) else None
    return record


_SPREADS = [index for index, field in enumerate(JOB_FIELDS) if field.reduce == SPREAD]
_EVERY_FIELD = 2 ** len(JOB_FIELDS) - 1


def _reduce_every_rank(np: Any, columns: np.ndarray, spreads: np.ndarray) -> dict[str, Any]:
    """``reduce``'s fields when every rank knew every field and the spreads' values are all
    finite (every step of a healthy run): the spreads' extremes found for all of them at
    once (a few numpy calls a step instead of ~10 per field), the same values."""
    lows, highs = spreads.argmin(axis=1).tolist(), spreads.argmax(axis=1).tolist()
    medians = row_medians(np, spreads)
    record: dict[str, Any] = {}
    for index, field in enumerate(JOB_FIELDS):
        column = columns[index]
        if field.reduce != SPREAD:
            record[field.name] = _one(field, column.astype(np.float64))
            continue
        slot = _SPREADS.index(index)
        low, high = lows[slot], highs[slot]
        record[field.name] = {Spread.MIN: short(column[low]), Spread.MIN_RANK: low,
                              Spread.MEDIAN: short(medians[slot]),
                              Spread.MAX: short(column[high]), Spread.MAX_RANK: high}
    return record


def _one(field: JobField, values: np.ndarray) -> float:
    """A MEAN or MAX field's number, from the values of the ranks that knew it (float64)."""
    return short(values.mean() if field.reduce == MEAN else values.max())


def short(value: Any) -> float:
    """A float32 of the exchange as the float it stands for, to its 7 significant digits
    (0.1, not 0.10000000149011612): a job_step line of a few hundred bytes."""
    return float(f"{float(value):.7g}")


# 10**k for k in 0..22: every one exact in float64 (5**22 < 2**53)
_POWERS = tuple(float(10 ** k) for k in range(23))


def shorts(values: np.ndarray) -> list[float]:
    """``[short(v) for v in values]`` in array operations: a bin's flush at 16384 ranks
    formats 4 x 16384 values, ~28 ms one at a time, ~1.6 ms so (CPU time).

    With d the value rounded to 7 significant digits as an integer and k = 6 - its decimal
    exponent, short(v) is the double nearest d / 10**k (what float() of the text gives); a
    division of two exact doubles (d < 2**53, 10**k for k <= 22) is that nearest double. d
    is rint(|v| * 10**k) where that product (off by at most ~1e-9) is not within 1e-6 of a
    rounding tie and has 7 digits; the values outside (ties, zeros kept as they are, values
    beyond 1e+/-15, NaN and infinities) go through ``short`` one by one."""
    import numpy as np

    values = np.asarray(values, np.float64)
    size = np.abs(values)
    usable = (size >= 1e-15) & (size < 1e15)        # False for 0, NaN and infinities
    size = np.where(usable, size, 1.0)              # the others: any value, no warnings
    k = 6 - np.floor(np.log10(size)).astype(np.int64)       # -8 .. 21
    power = np.asarray(_POWERS)[np.abs(k)]
    up = k >= 0
    scaled = np.where(up, size * power, size / power)
    digits = np.rint(scaled)
    usable &= (digits >= 1e6) & (digits < 1e7) & (np.abs(scaled - np.floor(scaled) - 0.5) > 1e-6)
    shown = np.copysign(np.where(up, digits / power, digits * power), values)
    shown = np.where(values == 0, values, shown)    # 0.0 and -0.0 as they are
    out: list[float] = shown.tolist()
    for index in np.flatnonzero(~usable & (values != 0)).tolist():
        out[index] = short(values[index])
    return out


def _spread(column: np.ndarray, mask: np.ndarray) -> dict[str, Any] | None:
    import numpy as np

    finite = np.isfinite(column)
    spread: dict[str, Any]
    if mask.all() and finite.all():         # the common case: every rank's, all finite
        finite, low, high, kept = mask, int(column.argmin()), int(column.argmax()), column
    else:
        finite &= mask
        low = int(np.where(finite, column, np.inf).argmin())
        high = int(np.where(finite, column, -np.inf).argmax())
        kept = column[finite]
    if len(kept):
        spread = {Spread.MIN: short(column[low]), Spread.MIN_RANK: low,
                  Spread.MEDIAN: short(row_medians(np, kept[None, :])[0]),
                  Spread.MAX: short(column[high]), Spread.MAX_RANK: high}
    else:
        spread = dict.fromkeys(Spread.REQUIRED)
    bad = () if finite is mask else np.flatnonzero(mask & ~finite).tolist()
    if len(bad):
        spread[Spread.NONFINITE_RANKS] = rank_set(bad)
    return spread
