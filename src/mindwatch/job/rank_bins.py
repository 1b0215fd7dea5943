"""The ranks-by-steps heatmap's data: each rank's value of each binned field (job/fields.py's
``bin``) over a bin of consecutive steps, written as one ``job_ranks`` record per bin.

Bins grow with the run, so that any run has a few hundred at most and a view reads them in
well under a second: 10 steps each up to step 100, 100 up to step 10,000, 1,000 beyond
(a 200k-step job: ~300 bins; at 4096 ranks ~40 MB of job.jsonl). Adding a step's rows, and
the values of a bin's flush, cost array operations over the ranks, none in Python per rank
(at 16384 ranks, CPU time: ~0.1 ms a step, a flush ~6.7 ms with its line encoded).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..job_schema import JobRanks, bin_steps
from .fields import JOB_FIELDS, KNOWN, MAX, MEAN, known_mask, shorts

if TYPE_CHECKING:
    import numpy as np

_BINNED = [(index, field) for index, field in enumerate(JOB_FIELDS) if field.bin]
_COLUMNS = [index for index, _ in _BINNED]
_MAX_SLOTS = [field.bin == MAX for _, field in _BINNED]
_BITS = sum(1 << index for index in _COLUMNS)         # the binned fields' known bits


class RankBins:
    def __init__(self) -> None:
        self._from: int | None = None    # the bin's first step
        self._end = 0                     # the step that closes it
        self._sums: np.ndarray | None = None      # (binned fields, ranks)
        self._counts: np.ndarray | None = None

    def add(self, step: int, rows: np.ndarray) -> dict[str, Any] | None:
        """Add ``step``'s rows; returns the bin's ``job_ranks`` fields when ``step`` closes
        it (the next multiple of its span), else None."""
        import numpy as np

        # (binned fields, ranks): each field's values contiguous, gathered in one pass over
        # the rows (a column read from them pulls the whole exchange through the cache)
        values = np.ascontiguousarray(rows[:, _COLUMNS].T, dtype=np.float64)
        bits = rows[:, KNOWN]
        # every rank knew every binned field (the common case): no mask to apply or count
        every = len(bits) > 0 and bool((bits == bits[0]).all()) \
            and int(bits[0]) & _BITS == _BITS
        known: Any = True if every else known_mask(rows)[:, _COLUMNS].T
        if self._sums is None or self._sums.shape != values.shape:
            self._sums = np.zeros(values.shape)
            self._counts = np.zeros(values.shape, np.int64)
            self._from = None
        assert self._counts is not None
        sums = self._sums
        if self._from is None:
            span = bin_steps(step)
            # the bin ends at the next multiple of its span: in sink mode the step jumps
            self._from, self._end = step, -(-step // span) * span
            sums[:] = np.where(_MAX_SLOTS, -np.inf, 0.0)[:, None]
            self._counts[:] = 0
        for slot, (_, field) in enumerate(_BINNED):
            here, mask = values[slot], True if every else known[slot]
            if field.bin == MEAN:
                sums[slot] += here if every else np.where(mask, here, 0.0)
            else:     # MAX: np.maximum lets NaN win, so a non-finite norm shows in its bin
                np.maximum(sums[slot], here, out=sums[slot], where=mask)
        self._counts += known       # True: one more for every rank and field
        if step < self._end:
            return None
        return self.flush(step)

    def flush(self, step: int) -> dict[str, Any] | None:
        """The open bin's fields, ending at ``step`` (training ended), or None."""
        import numpy as np

        if self._from is None or self._sums is None or self._counts is None:
            return None
        record: dict[str, Any] = {JobRanks.STEP_FROM: self._from, JobRanks.STEP: step}
        for slot, (_, field) in enumerate(_BINNED):
            counts = self._counts[slot]
            values = self._sums[slot] / np.maximum(counts, 1) if field.bin == MEAN \
                else self._sums[slot]
            shown = shorts(values)        # each short(v), in array operations
            record[field.name] = shown if counts.all() else [
                v if n else None for v, n in zip(shown, counts.tolist(), strict=True)]
        self._from = None
        return record
