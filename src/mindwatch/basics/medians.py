"""Exact medians of long float rows, fast: the middle order statistics selected among the
values near a fixed sample's median instead of a partition of the whole row. The job log's
spreads (job/fields.py) and the straggler rule's median of every rank's median
(detectors/straggler.py) take one per step over thousands of ranks; the result is the one
``np.median`` gives, bit for bit, with a partition as the fallback. numpy is passed in (the
callers have imported it): a module of basics imports nothing heavy."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np


def short_row_medians(np: Any, values: np.ndarray) -> np.ndarray:
    """Each row's median of a (rows, window) block of short rows (a rank's last 20 data
    times), as statistics.median computes it: the middle value, or the two middle ones'
    mean, in float64. A sort of each row: np.partition and np.median are slower on rows
    this short (~1 ms at 16384 rows x 20, float32)."""
    ordered = np.sort(values, axis=1)
    mid = ordered.shape[1] // 2
    middle = ordered[:, mid].astype(np.float64)
    return middle if ordered.shape[1] % 2 else (ordered[:, mid - 1] + middle) / 2


def medians(np: Any, block: np.ndarray) -> list[Any]:
    """``np.median`` of each row of ``block`` (fields, ranks) of finite values, exactly: np.mean
    of the middle one or two, in their dtype, as np.median takes them. Over many ranks they
    are selected among the values near a sample's median (``middles``: at 16384 ranks
    ~0.12 ms a row where np.partition takes ~0.19, CPU time on fresh values); where that
    misses, or a middle value is 0 (np.median's own partition decides whether it is 0.0 or
    -0.0, equal to any selection), its partition of the whole row."""
    count = block.shape[1]
    half, odd = count // 2, count % 2 == 1
    low = half if odd else half - 1
    picked = middles(np, block, low, half) if count >= SAMPLED_FROM else [None] * len(block)
    found = []
    for values, middle in zip(block, picked, strict=True):
        if middle is not None and middle.all():
            # np.mean's sum (in their dtype) and division of these, for values that are not 0
            found.append(middle[0] if odd else middle.dtype.type((middle[0] + middle[1]) / 2))
            continue
        middle = np.partition(values, [half, -1] if odd else [half - 1, half, -1])
        found.append(np.mean(middle[low:half + 1], axis=0))
    return found


# middles samples this many values of a row; below SAMPLED_FROM a partition costs as little.
SAMPLE, SAMPLED_FROM = 512, 1024


def middles(np: Any, block: np.ndarray, low: int, high: int) -> list[np.ndarray | None]:
    """The ``low``-th to ``high``-th smallest values of each row (``high`` <= ``low`` + 1),
    or None where they are not between two order statistics of a fixed sample of the row
    (4 standard deviations of the sample median's rank either side: about once in 10**4
    steps). Exact: the values below that band are counted, those in it partitioned; the
    band's passes are vectorised over every row at once, not a partition's branches."""
    count = block.shape[1]
    spots = (np.arange(SAMPLE, dtype=np.int64) * 2654435761) % count    # no stride of it
    sample = np.sort(block[:, spots], axis=1)
    band = 2 * int(SAMPLE ** 0.5)              # a standard deviation: sqrt(SAMPLE) / 2
    lo, hi = sample[:, SAMPLE // 2 - band, None], sample[:, SAMPLE // 2 + band, None]
    below = np.count_nonzero(block < lo, axis=1).tolist()
    inside = (block >= lo) & (block <= hi)
    selected: list[np.ndarray | None] = []
    for values, within, under in zip(block, inside, below, strict=True):
        kept = values[within]
        if not under <= low <= high < under + len(kept):
            selected.append(None)
            continue
        kth = sorted({low - under, high - under})
        selected.append(np.partition(kept, kth)[low - under:high - under + 1])
    return selected
