"""The job log's records as the view's columns (read.py, condense.py): ``job_step``
fields as float64 arrays over the steps, a ``job_ranks`` bin's lists as arrays over the
ranks; numbers, null and the log's non-finite strings converted in C (numpy), whatever
decoded them (msgspec Structs or dicts).
"""
from __future__ import annotations

from operator import attrgetter
from typing import TYPE_CHECKING, Any

from ...job_schema import JobRanks, JobStep, Spread
from .. import fast
from ..columns import field_values
from ..lines import Record

if TYPE_CHECKING:
    import numpy as np

SPREADS = (JobStep.STEP_TIME_S, JobStep.DATA_TIME_S, JobStep.LOCAL_GRAD_NORM,
           JobStep.MEMORY_MB)
# the view's own key in each event, hang and end record: its segment, 1, 2, ...
SEGMENT = "segment"
SPREAD_FIELDS = (Spread.MIN, Spread.MEDIAN, Spread.MAX, Spread.MIN_RANK, Spread.MAX_RANK)
BINNED = (JobRanks.STEP_TIME_S, JobRanks.DATA_TIME_S, JobRanks.LOCAL_GRAD_NORM,
          JobRanks.MEMORY_MB)

def step_columns(items: list[Any], empty: Any = None) -> dict[str, np.ndarray]:
    """The ``job_step`` fields of ``items`` (Structs or dicts) as float64 arrays (NaN:
    null; ranks too, -1 where unknown once ``view.py`` makes them ints); ``empty``: the
    Spread Struct of nulls, when ``items`` are Structs (their spreads are then read in C)."""
    columns = {name: floats(field_values(items, name))     # skipped: 1.0 for true
               for name in (JobStep.STEP, JobStep.LOSS, JobStep.GRAD_NORM, JobStep.SKIPPED)}
    for name in SPREADS:
        spreads = field_values(items, name)
        if empty is not None and set(map(type, spreads)) <= {type(empty), type(None)}:
            full = [empty if s is None else s for s in spreads] if None in spreads \
                else spreads
            for sub in SPREAD_FIELDS:
                columns[f"{name}.{sub}"] = floats(list(map(attrgetter(sub), full)))
        else:
            for sub in SPREAD_FIELDS:
                columns[f"{name}.{sub}"] = floats([_sub(s, sub) for s in spreads])
    return columns


def _sub(spread: Any, name: str) -> Any:
    if isinstance(spread, dict):
        return spread.get(name)
    return getattr(spread, name, None) if spread is not None else None


def floats(values: list[Any]) -> np.ndarray:
    """Numbers, None (NaN) and the log's "NaN"/"Infinity"/"-Infinity" as a float64 array, in
    C; a value that is none of these (a writer's mistake) is NaN."""
    import numpy as np

    try:
        return np.array(values, dtype=np.float64)
    except (TypeError, ValueError):
        return np.array([_float(v) for v in values], dtype=np.float64)


def _float(value: Any) -> float:
    if isinstance(value, bool) or value is None:
        return float("nan") if value is None else float(value)
    if isinstance(value, (int, float)):
        return float(value)
    revived = fast.revive(value, True)
    return revived if isinstance(revived, float) else float("nan")


def bin_arrays(record: Record) -> Record:
    """A ``job_ranks`` record with each binned field as a float64 array over the ranks (NaN:
    unknown, or not finite: a non-finite norm shows as NaN)."""
    out = dict(record)
    for name in BINNED:
        value = record.get(name)
        out[name] = floats(value) if isinstance(value, list) else None
    return out
