"""The report's heatmaps of ``state`` records: one per quantity, layers (or watched sub-Cells)
down, state steps across, colour on a log scale, anomalies marked on their cell.

Sized for a million steps and a hundred layers: the columns are at most ``MAX_COLUMNS`` bins
of consecutive state records, each showing the largest value of its bin (a spike is never
averaged away; NaN and +inf win over any number), and the cells travel as one byte each, in
base64: 100 layers x 600 bins is 80 KB of page per quantity. Drawn by heatmap.js on a canvas.
Only the first rank with state records is drawn: under data parallelism the weights, the
updates and the moments are the same on every rank.

A few hundred layers make some 800k cells: a row whose values are all plain positive numbers
(the usual row) is binned with C's ``max`` over each bin's slice and coded in one expression
per cell; any other row (a NaN, an inf, a zero, a gap) cell by cell (``_bin_value``,
``_code``). The cells are the same either way.
"""
from __future__ import annotations

import base64
import bisect
import math
import re
from collections.abc import Mapping, Sequence
from typing import Any

from ..anomaly import ATTENTION_LOGIT, UPDATE_RATIO
from ..basics import format as fmt
from ..records import Activation, Anomaly, Common, LayerState
from ..runlog.states import ABSENT, StateColumns

MAX_COLUMNS = 600
MAX_MARKS = 2000
# Cell codes: 0..TOP a colour on the scale; then the cells no colour describes.
TOP, NO_DATA, NOT_POSITIVE, NAN, INF = 239, 250, 251, 252, 253
QUANTITIES = (   # (field, title), in the page's order
    (LayerState.UPDATE_RATIO, "update/weight ratio per layer"),
    (LayerState.GRAD_NORM, "gradient norm per layer (before clipping)"),
    (LayerState.WEIGHT_NORM, "weight norm per layer"),
    (LayerState.UPDATE_NORM, "update norm per layer"),
    (LayerState.M_NORM, "optimizer first moment norm per layer"),
    (LayerState.V_NORM, "optimizer second moment norm per layer"),
    (Activation.MAX_LOGIT, "largest attention logit per attention cell"),
    (Activation.MAX_ABS, "activation max |x| per watched sub-Cell"),
    (Activation.RMS, "activation RMS per watched sub-Cell"),
)
# The anomaly kinds that name a row (``layer``), and the heatmap they are marked on.
MARKED_ON = {UPDATE_RATIO: LayerState.UPDATE_RATIO, ATTENTION_LOGIT: Activation.MAX_LOGIT}


def _natural(name: str) -> list[Any]:
    """``blocks.2`` before ``blocks.10``."""
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", name)]


def bin_edges(count: int, columns: int) -> list[int]:
    """``columns + 1`` positions splitting ``count`` state records into consecutive bins."""
    return [count * b // columns for b in range(columns + 1)]


def _bin_value(values: Sequence[float]) -> float:
    """The largest value of a bin; NaN over +inf over numbers; ABSENT when none is there."""
    best, nan = ABSENT, False
    for value in values:
        if value != value:
            nan = True
        elif value > best:
            best = value
    return math.nan if nan else best


def _bins(values: Sequence[float], edges: list[int], columns: int) -> tuple[list[float], bool]:
    """A row's bins (``_bin_value`` of each), and whether every one is a positive number
    below +inf (a plain row). Without NaN, a bin's value is its slice's ``max`` (ABSENT
    is -inf, below every value; +inf wins), taken in C."""
    if any(map(math.isnan, values)):
        row = [_bin_value(values[edges[b]:edges[b + 1]]) for b in range(columns)]
        return row, False
    row = [max(values[edges[b]:edges[b + 1]]) for b in range(columns)]
    return row, bool(row) and min(row) > 0 and max(row) < math.inf


def _plain_codes(row: list[float], low: float, span: float) -> list[int]:
    """``_code`` of each value of a plain row (positive numbers below +inf)."""
    return [TOP if code > TOP else 0 if code < 0 else code
            for code in map(round, [(math.log10(value) - low) / span * TOP for value in row])]


def _code(value: float, low: float, span: float) -> int:
    if value == ABSENT:
        return NO_DATA
    if math.isnan(value):
        return NAN
    if value == math.inf:
        return INF
    if value <= 0:
        return NOT_POSITIVE
    return min(TOP, max(0, round((math.log10(value) - low) / span * TOP)))


def heatmap(states: StateColumns, quantity: str, title: str, rank: int,
            anomalies: Sequence[Mapping[str, Any]], max_columns: int = MAX_COLUMNS
            ) -> dict[str, Any] | None:
    names = sorted(states.series.get(quantity, {}), key=_natural)
    if not names:
        return None
    steps = states.steps
    columns = min(len(steps), max_columns)
    edges = bin_edges(len(steps), columns)
    binned = [_bins(states.column(quantity, name), edges, columns) for name in names]
    # the extremes of log10 over the positive numbers below +inf: a plain row's in C
    extremes: list[float] = []
    for row, plain in binned:
        logs = list(map(math.log10, row)) if plain else [
            math.log10(v) for v in row if 0 < v < math.inf]
        if logs:
            extremes += (min(logs), max(logs))
    low, high = (min(extremes), max(extremes)) if extremes else (0.0, 1.0)
    if high == low:                 # one value throughout: the middle of a decade around it
        low, high = low - 0.5, high + 0.5
    span = high - low
    cells = bytearray()
    for row, plain in binned:
        cells += bytes(_plain_codes(row, low, span) if plain else
                       [_code(value, low, span) for value in row])
    rows = {name: i for i, name in enumerate(names)}
    marks: list[dict[str, Any]] = []
    ticks: list[dict[str, Any]] = []
    for a in anomalies:
        step = a.get(Anomaly.STEP)
        if type(step) is not int or a.get(Common.RANK) != rank or len(marks) >= MAX_MARKS:
            continue
        # the bin of the first state record at or after the step
        position = min(bisect.bisect_left(steps, step), len(steps) - 1)
        column = min(columns - 1, bisect.bisect_right(edges, position) - 1)
        kind = a.get(Anomaly.ANOMALY)
        entry = {"col": column, "step": step, "kind": kind,
                 "message": str(a.get(Anomaly.MESSAGE))}
        if MARKED_ON.get(str(kind)) == quantity and a.get(Anomaly.LAYER) in rows:
            marks.append({**entry, "row": rows[a[Anomaly.LAYER]]})
        elif kind not in MARKED_ON:
            ticks.append(entry)
    return {
        "id": f"heat-{quantity}", "title": f"{title} (rank {rank}, log colour scale)",
        "rows": names, "columns": columns,
        "steps": [[steps[edges[b]], steps[edges[b + 1] - 1]] for b in range(columns)],
        "cells": base64.b64encode(bytes(cells)).decode("ascii"),
        # log10 of the colours' ends, and their labels
        "scale": [low, low + span], "labels": [fmt.number(10 ** low), fmt.number(10 ** high)],
        "marks": marks, "ticks": ticks[:MAX_MARKS]}


def build_heatmaps(scans: Sequence[Any], anomalies: Sequence[Mapping[str, Any]],
                   max_columns: int = MAX_COLUMNS) -> list[dict[str, Any]]:
    """The heatmaps of the first rank whose log holds state records (``scans``: the
    report's ``Scanned`` ranks)."""
    for scanned in scans:
        states = scanned.scan.states
        if len(states):
            found = [heatmap(states, quantity, title, scanned.log.rank, anomalies, max_columns)
                     for quantity, title in QUANTITIES]
            return [h for h in found if h is not None]
    return []
