"""The job page's ranks-by-steps heatmaps (step time, local gradient norm) from the job log's
``job_ranks`` bins (job/rank_bins.py: each rank's mean or max over a bin of steps), drawn by
heatmap.js as the state heatmaps are (heatmaps.py: a byte per cell in base64, log colour).

Readable at 4096 ranks: the rows are groups of consecutive ranks, at most ``MAX_ROWS`` of
them (16 ranks a row at 4096), each cell the largest value of its group (NaN and +inf win),
so one slow or exploding rank colours its row; a second byte per cell names which rank of
the group that was, for the tooltip. Columns are the bins merged into equal spans of steps
(``_columns``; ~200 at 200k steps), so the step axis lines up with the charts'. A job event
is outlined on its origin rank's row (on each of its ranks' rows when it names at most
``MAX_MARKED_RANKS`` and no origin), else a tick over its step. All of it numpy over the
(ranks, bins) grid: ~0.1 s at 4096 x 300.
"""
from __future__ import annotations

import base64
import math
from typing import Any

import numpy as np

from ...basics import format as fmt
from ...basics.rank_set import ranks_in
from ...job_schema import Event, JobRanks
from ...runlog.job.view import JobView
from ..heatmaps import INF, MAX_COLUMNS, MAX_MARKS, NAN, NO_DATA, NOT_POSITIVE, TOP

MAX_ROWS = 256           # pixel rows of a heatmap, at most (heatmap.js: 4 px each then)
MAX_MARKED_RANKS = 8     # an event of more ranks and no origin is a tick, not outlines
OWN_NAN = {JobRanks.LOCAL_GRAD_NORM}   # fields whose NaN can be the value (not "unknown")
FIELDS = (   # (job_ranks field, title, what a cell is)
    (JobRanks.STEP_TIME_S, "Step time per rank (s)",
     "mean over the bin's steps; the largest of the row's ranks"),
    (JobRanks.LOCAL_GRAD_NORM, "Local gradient norm per rank (before the reduction)",
     "max over the bin's steps and the row's ranks"),
)


def _grid(bins: list[dict[str, Any]], name: str, ranks: int) -> tuple[Any, Any]:
    """(ranks, bins) float values and whether each is known. A bin holds NaN for a value
    unknown and for one not finite alike (runlog/job/read.py): a NaN is the value's own
    only for a field that can be (``OWN_NAN``: a norm) and on a rank that had a finite
    value of it in another bin; a rank whose field was never finite reads as no data."""
    values = np.full((ranks, len(bins)), np.nan)
    for column, record in enumerate(bins):
        # an array (read_job), or the record's list: None -> NaN, "Infinity" -> inf
        row = np.asarray(record[name], dtype=np.float64)[:ranks]
        values[:len(row), column] = row
    known = ~np.isnan(values)
    if name in OWN_NAN:
        known |= known.any(axis=1, keepdims=True)
    return values, known


def _codes(values: Any, known: Any) -> tuple[Any, float, float]:
    """Each cell's byte (heatmaps.py's codes) and the log10 extremes of the colour scale."""
    positive = known & np.isfinite(values) & (values > 0)
    logs = np.log10(np.where(positive, values, 1.0))
    low, high = (float(logs[positive].min()), float(logs[positive].max())) \
        if positive.any() else (0.0, 1.0)
    if high == low:                  # one value throughout: a decade around it
        low, high = low - 0.5, high + 0.5
    codes = np.full(values.shape, NO_DATA, np.uint8)
    codes[positive] = np.clip(np.rint((logs[positive] - low) / (high - low) * TOP), 0, TOP)
    codes[known & np.isfinite(values) & (values <= 0)] = NOT_POSITIVE
    codes[known & np.isnan(values)] = NAN
    codes[known & (values == math.inf)] = INF
    return codes, low, high


def _columns(bins: list[dict[str, Any]], max_columns: int) -> tuple[Any, Any]:
    """The bins merged into columns of equal steps: the largest bin's span (bins grow from
    10 to 1000 steps: rank_bins.py), a multiple of it when that makes more than
    ``max_columns``, so a column is as many steps early in the run as late. Bins end on
    multiples of their span, which divide the column's: a bin lies in one column. Returns
    the bins' order by column and each column's first position in that order."""
    first = np.array([b.get(JobRanks.STEP_FROM, b[JobRanks.STEP]) for b in bins], np.int64)
    last = np.array([b[JobRanks.STEP] for b in bins], np.int64)
    largest = int((last - first).max()) + 1
    needed = -(-(int(last.max()) - int(first.min()) + 1) // max_columns)
    span = largest * -(-needed // largest)
    column = (first - 1) // span
    order = np.argsort(column, kind="stable")
    return order, np.flatnonzero(np.diff(column[order], prepend=-1))


def _merge(bins: list[dict[str, Any]], values: Any, known: Any, max_columns: int
           ) -> tuple[Any, Any, list[list[int]]]:
    """(ranks, columns) values and known, and each column's [first, last] step."""
    order, starts = _columns(bins, max_columns)
    # np.maximum lets NaN win; an unknown cell, -inf here, never does
    merged = np.maximum.reduceat(np.where(known, values, -np.inf)[:, order], starts, axis=1)
    seen = np.logical_or.reduceat(known[:, order], starts, axis=1)
    firsts = [b.get(JobRanks.STEP_FROM, b[JobRanks.STEP]) for b in bins]
    lasts = [b[JobRanks.STEP] for b in bins]
    ends = [*starts[1:].tolist(), len(order)]
    spans = [[min(firsts[i] for i in order[a:b]), max(lasts[i] for i in order[a:b])]
             for a, b in zip(starts.tolist(), ends, strict=True)]
    return merged, seen, spans


def _group(values: Any, known: Any, max_rows: int) -> tuple[Any, Any, Any, int]:
    """Rows of ``group`` consecutive ranks: each cell the largest of its group (NaN wins;
    the unknown, -inf, never), whether any was known, and which of the group it was."""
    ranks, columns = values.shape
    group = -(-ranks // max_rows)
    rows = -(-ranks // group)
    filled = np.full((rows * group, columns), -np.inf)
    filled[:ranks] = np.where(known, values, -np.inf)
    seen = np.zeros((rows * group, columns), bool)
    seen[:ranks] = known
    grouped = filled.reshape(rows, group, columns)
    return (grouped.max(axis=1), seen.reshape(rows, group, columns).any(axis=1),
            grouped.argmax(axis=1), group)        # argmax: the first NaN, else the largest


def _marks(view: JobView, spans: list[list[int]], group: int, ranks: int
           ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The job's events: outlines on their ranks' rows (``marks``), else ``ticks``."""
    firsts = np.array([first for first, _ in spans], np.int64)
    marks: list[dict[str, Any]] = []
    ticks: list[dict[str, Any]] = []
    for event in view.events:
        step = event.get(Event.STEP)
        if type(step) is not int or len(marks) + len(ticks) >= MAX_MARKS:
            continue
        # the last column that starts at or before the step
        column = max(0, int(np.searchsorted(firsts, step, side="right")) - 1)
        entry = {"col": column, "step": step,
                 "kind": ", ".join(map(str, event.get(Event.KINDS) or ())),
                 "message": str(event.get(Event.MESSAGE))}
        origin = event.get(Event.ORIGIN_RANK)
        marked = [origin] if isinstance(origin, int) else \
            _few_ranks(event.get(Event.RANKS), event.get(Event.RANK_COUNT))
        rows = sorted({rank // group for rank in marked if 0 <= rank < ranks})
        if rows:
            marks += [{**entry, "row": row} for row in rows]
        else:
            ticks.append(entry)
    return marks[:MAX_MARKS], ticks


def _few_ranks(ranks: Any, count: Any) -> list[int]:
    """The ranks of a rank set that names at most ``MAX_MARKED_RANKS``; else none."""
    if not isinstance(ranks, str) or not isinstance(count, int) or count > MAX_MARKED_RANKS:
        return []
    return ranks_in(ranks)


def rank_heatmap(view: JobView, name: str, title: str, note: str,
                 max_rows: int = MAX_ROWS, max_columns: int = MAX_COLUMNS
                 ) -> dict[str, Any] | None:
    """The heatmap of one binned field (heatmap.js's data); None when no bin holds it."""
    bins = [b for b in view.bins if b.get(name) is not None]
    if not bins:
        return None
    ranks = max([view.world_size] + [len(b[name]) for b in bins])
    values, known, spans = _merge(bins, *_grid(bins, name, ranks), max_columns)
    cells, seen, worst, group = _group(values, known, max_rows)
    codes, low, high = _codes(cells, seen)
    marks, ticks = _marks(view, spans, group, ranks)
    found = {
        "id": f"heat-ranks-{name}", "title": f"{title}, ranks by steps (log colour scale)",
        "rows": [f"rank {r}" if group == 1 else f"ranks {r}-{min(r + group, ranks) - 1}"
                 for r in range(0, ranks, group)],
        "columns": len(spans), "steps": spans,
        "cells": base64.b64encode(codes.tobytes()).decode("ascii"),
        "scale": [low, high], "labels": [fmt.number(10 ** low), fmt.number(10 ** high)],
        "note": note, "group": group, "marks": marks, "ticks": ticks}
    if 1 < group <= 256:
        # which rank of the row holds the cell's value: its offset in the group, a byte
        found["worst"] = base64.b64encode(worst.astype(np.uint8).tobytes()).decode("ascii")
    return found


def build_rank_heatmaps(view: JobView) -> list[dict[str, Any]]:
    found = [rank_heatmap(view, name, title, note) for name, title, note in FIELDS]
    return [h for h in found if h is not None]
