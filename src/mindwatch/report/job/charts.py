"""The report's charts of a job of many ranks (issue #43), from its ``JobView``
(runlog/job/view.py): each per-rank quantity as the step's spread across ranks, a band from
min to max with the median line, plus the curves of a few named ranks, so a chart holds the
same few series at 5 ranks and at 4096.

The named ranks are those a reader asks about: the origin ranks of the job's events, the
rank most often slowest and the one most often using the most memory
(``named_ranks``). Their curves come from their own rank logs, the only ones the page reads;
a quantity their logs' scans do not keep (data time, local gradient norm, memory) comes from
the job's per-rank bins (``job_ranks``: a point per bin, its mean or max over the bin's
steps), as does everything of a rank whose log is not there.

Every band edge is downsampled as the per-rank curves are (downsample.py: each bucket keeps
its min and max, so a spike of the max edge stays); the steps of the job's events are
always kept. The max and min edges' tooltips name the rank that held the value.
"""
from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from itertools import pairwise
from typing import Any

import numpy as np

from ...basics import format as fmt
from ...job_schema import Event, JobRanks, JobStep
from ...records import Run, Step
from ...runlog import RankScan
from ...runlog.job.view import JobView, SpreadColumns
from ...runlog.steps import StepIndex
from ..axes import panel_axis
from ..downsample import downsample
from ..panels import MAX_ANOMALY_ROWS, curve, positions_of

MAX_NAMED = 6          # named ranks' curves on a chart, at most: the legend stays one line
MAX_ORIGINS = 4        # of which event origins (most events first)
# Named ranks get colours the band's min/median/max lines (plot.js SPREAD) do not use.
NAMED_COLOURS = ("#d62728", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22")
# (job_step spread field, title, log option); the order of the page
BANDS = (
    (JobStep.STEP_TIME_S, "Step time across ranks (s)", "auto"),
    (JobStep.DATA_TIME_S, "Data time across ranks (s, waiting for the batch)", "auto"),
    (JobStep.LOCAL_GRAD_NORM, "Local gradient norm across ranks (before the reduction)",
     "auto"),
    (JobStep.MEMORY_MB, "Memory across ranks (MB)", False),
)
# How a field's bin value was reduced over the bin's steps (job/fields.py: ``bin``)
BIN_NOTE = {JobRanks.STEP_TIME_S: "mean", JobRanks.DATA_TIME_S: "mean",
            JobRanks.LOCAL_GRAD_NORM: "max", JobRanks.MEMORY_MB: "max"}


def place_label(view: JobView, rank: int) -> str:
    """``rank 11 (node-b, device 3)``; the parts not known left out."""
    host, device = view.places.get(rank, (None, None))
    where = ", ".join(part for part in (host, None if device is None else f"device {device}")
                      if part)
    return f"rank {rank} ({where})" if where else f"rank {rank}"


def _most_often(ranks: Any) -> tuple[int, float] | None:
    """The rank that appears most often among ``ranks`` (-1: unknown), and its share."""
    known = np.asarray(ranks, np.int64)
    known = known[known >= 0]
    if not len(known):
        return None
    counts = np.bincount(known)
    rank = int(counts.argmax())
    return rank, float(counts[rank]) / len(known)


def named_ranks(view: JobView) -> dict[int, list[str]]:
    """The ranks whose own curves the charts draw, each with why: the events' origin ranks
    (most events first, then the earliest), the rank most often slowest, the one most often
    holding the most memory; at most ``MAX_NAMED``, in that order."""
    named: dict[int, list[str]] = {}
    origins = Counter(origin for e in view.events
                      if isinstance(origin := e.get(Event.ORIGIN_RANK), int))
    for rank, count in origins.most_common(MAX_ORIGINS):
        named[rank] = [f"origin of {fmt.count(count, 'event')}"]
    for name, what in ((JobStep.STEP_TIME_S, "slowest"), (JobStep.MEMORY_MB, "most memory")):
        columns = view.spreads.get(name)
        found = _most_often(columns.max_rank) if columns is not None else None
        if found is not None:
            rank, share = found
            named.setdefault(rank, []).append(f"{what} at {share * 100:.0f}% of steps")
    return dict(list(named.items())[:MAX_NAMED])


def _last_per_step(steps: Any) -> Any:
    """Indices putting ``steps`` in ascending order, keeping each step's last record (a
    resumed job logs again the steps after its checkpoint); None when they already ascend."""
    steps = np.asarray(steps)
    if len(steps) < 2 or bool(np.all(np.diff(steps) > 0)):
        return None
    reverse = steps[::-1]
    _, first = np.unique(reverse, return_index=True)
    return len(steps) - 1 - first


def _series(steps: Any, values: Any, n: int, keep: Any) -> tuple[list[Any], list[float],
                                                                    list[int]]:
    """``values`` (NaN: unknown, left out) downsampled to ``n`` points, the steps in
    ``keep`` kept: (steps, values, their indices into ``values``)."""
    values = np.asarray(values, np.float64)
    known = np.flatnonzero(~np.isnan(values))
    known_steps = steps[known]
    keep_at = np.flatnonzero(np.isin(known_steps, keep)).tolist()
    # downsample() over positions: what comes back is which points it kept
    picked, ys = downsample(range(len(known)), values[known].tolist(), n, keep_at=keep_at)
    index = known[np.asarray(picked, np.int64)]
    return steps[index].tolist(), ys, index.tolist()


def band_lines(steps: Any, columns: SpreadColumns, n: int, keep: Any) -> list[dict[str, Any]]:
    """The max edge, the median, the min edge of one spread field; the edges' tooltips name
    their rank. Empty when no step knows the field."""
    lines = []
    for stat, band in (("max", "hi"), ("median", None), ("min", "lo")):
        xs, ys, index = _series(steps, getattr(columns, stat), n, keep)
        if not xs:
            return []
        text = list(map(fmt.number, ys))
        if band is not None:
            ranks = np.asarray(getattr(columns, f"{stat}_rank"))[index].tolist()
            text = [f"{t} on rank {r}" if r >= 0 else t for t, r in zip(text, ranks, strict=True)]
        line = {"label": f"{stat} across ranks" if band else "median", "rank": -1, "x": xs,
                "y": ys, "text": text, "spread": stat}
        if band is not None:
            line["band"] = band
        lines.append(line)
    return lines


def _bin_column(view: JobView, name: str, rank: int) -> tuple[list[int], list[float]]:
    """``rank``'s value of ``name`` in each job_ranks bin that knows it: (bin end steps,
    values). A bin's NaN is unknown, or a value not finite (runlog/job/read.py): kept for a
    norm, whose NaN the chart must show, left out of a time or a memory, never NaN."""
    own_nan = name == JobRanks.LOCAL_GRAD_NORM
    xs, ys = [], []
    for record in view.bins:
        values = record.get(name)
        if values is None or rank >= len(values) or values[rank] is None:
            continue
        value = float(values[rank])          # an array's, or a record's ("NaN" as JSON has it)
        if value == value or own_nan:
            xs.append(record[JobRanks.STEP])
            ys.append(value)
    if any(b <= a for a, b in pairwise(xs)):       # a resumed job: each bin's last record
        last = dict(zip(xs, ys, strict=True))
        xs = sorted(last)
        ys = [last[x] for x in xs]
    return xs, ys


def _named_line(view: JobView, rank: int, colour: str, name: str, scan: RankScan | None,
                keep: list[int], n: int) -> dict[str, Any] | None:
    """``rank``'s curve of ``name``: from its log's scan when that keeps the field, else
    from the job's bins (dashed, "per bin" in its label); None when neither has a value."""
    label = place_label(view, rank)
    if scan is not None and name in scan.steps and len(scan.steps[name]):
        line = curve(label, rank, scan.steps[Step.STEP], scan.steps[name], n, keep,
                     colour=colour)
        if any(v == v for v in line["y"]):            # a value, not only NaN
            return line
    if name not in BIN_NOTE:
        return None
    xs, ys = _bin_column(view, name, rank)
    if not xs:
        return None
    note = f" ({BIN_NOTE[name]} of the bin)"
    return {"label": f"{label}, per bin", "rank": rank, "x": xs, "y": ys,
            "text": [fmt.number(v) + note for v in ys], "colour": colour, "dash": 1}


def event_steps(view: JobView) -> list[int]:
    return [e[Event.STEP] for e in view.events[:MAX_ANOMALY_ROWS]
            if isinstance(e.get(Event.STEP), int)]


def build_job_panels(view: JobView, scans: Mapping[int, RankScan], named: Sequence[int],
                     max_points: int = 2000) -> list[dict[str, Any]]:
    """The job page's panels (the data ``plot.js`` draws, as ``panels.build_panels``
    gives it): the job's loss, the LR, the global gradient norm, then a band per spread
    field; ``scans``: the named ranks' rank logs that could be read."""
    n = max_points
    order = _last_per_step(view.steps)
    pick = (lambda column: np.asarray(column)) if order is None else \
        (lambda column: np.asarray(column)[order])
    steps = pick(view.steps)
    marked = event_steps(view)
    keep = np.asarray(sorted(set(marked)), np.int64)
    colours = {rank: NAMED_COLOURS[i % len(NAMED_COLOURS)] for i, rank in enumerate(named)}
    keeps = {rank: positions_of(StepIndex(scan.steps[Step.STEP], scan.ascending),
                                scan.steps[Step.STEP], set(marked))
             for rank, scan in scans.items()}

    def named_lines(name: str) -> list[dict[str, Any]]:
        found = [_named_line(view, rank, colours[rank], name, scans.get(rank),
                             keeps.get(rank, []), n) for rank in named]
        return [line for line in found if line is not None]

    def job_line(label: str, column: Any) -> list[dict[str, Any]]:
        values = pick(column).astype(np.float64)
        if not np.isfinite(values).any():
            return []
        keep_at = np.flatnonzero(np.isin(steps, keep)).tolist()
        xs, ys = downsample(steps.tolist(), values.tolist(), n, keep_at=keep_at)
        return [{"label": label, "rank": -1, "x": xs, "y": ys,
                 "text": list(map(fmt.number, ys)), "colour": "#1d2329"}]

    config = (view.runs[-1] if view.runs else {}).get(Run.CONFIG) or {}
    hlines = [{"y": config[key], "label": f"{key} {config[key]:g}"}
              for key in ("grad_explode", "grad_vanish")
              if isinstance(config.get(key), (int, float))]
    lr = next(([line] for rank in named
               if (line := _named_line(view, rank, colours[rank], Step.LR, scans.get(rank),
                                       keeps.get(rank, []), n)) is not None), [])
    panels: list[dict[str, Any]] = [
        {"id": "loss", "title": "Loss: mean over ranks, and the named ranks'", "log": "auto",
         "lines": job_line("mean over ranks", view.loss) + named_lines(Step.LOSS)},
        {"id": "lr", "title": "Learning rate (a named rank's)", "lines": lr},
        {"id": "grad_norm", "title": "Gradient norm (global L2, before clipping)", "log": True,
         "hlines": hlines, "lines": job_line("global", view.grad_norm)},
    ]
    for name, title, log in BANDS:
        columns = view.spreads.get(name)
        if columns is None:
            continue
        spread = SpreadColumns(*(pick(getattr(columns, stat)) for stat in
                                 ("min", "median", "max", "min_rank", "max_rank")))
        band = band_lines(steps, spread, n, keep)
        if band:
            panels.append({"id": name, "title": title, "log": log, "band": True,
                           "lines": band + named_lines(name)})
    panels = [p for p in panels if p["lines"]]
    xs = [x for panel in panels for line in panel["lines"] for x in line["x"]]
    for panel in panels:
        panel["markers"] = True
        panel["x_range"] = [min(xs), max(xs)] if xs else None
        panel["axis"] = panel_axis(panel)
    return panels
