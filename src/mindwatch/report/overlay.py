"""Several runs' panels drawn over each other: the panels of each run, built as for a page of
its own (``panels.build_panels``), merged by panel id into one set on one step axis.

Each curve is renamed after its run (``<run>`` for a run of one rank, ``<run> rank <R>``
otherwise) and given a colour here, once, for the HTML page and the PNGs alike: every run
its own colour, its ranks lighter shades of it, so the runs stay apart however many ranks
they have (the tooltip names each curve). The spread curves of a run (min / median / max
across its ranks) take the run's colour and a dash per statistic.
"""
from __future__ import annotations

from typing import Any

from .axes import panel_axis

PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#17becf",
           "#bcbd22")     # plot.js's, so a one-rank run keeps the colour it has on its own page
SPREAD_DASH = {"median": 0, "max": 1, "min": 2}    # indices of plot.js's DASHES
# The last of a run's ranks is this far from its colour towards white: lighter and it would
# fade into the background of the chart.
MAX_LIGHTEN = 0.6


def run_colour(index: int) -> str:
    return PALETTE[index % len(PALETTE)]


def shade(colour: str, position: int, count: int) -> str:
    """The colour of the ``position``-th of ``count`` ranks: the first the run's own colour,
    the others evenly lighter, up to ``MAX_LIGHTEN`` of the way to white."""
    if count <= 1 or position <= 0:
        return colour
    towards = MAX_LIGHTEN * position / (count - 1)
    rgb = [int(colour[i:i + 2], 16) for i in (1, 3, 5)]
    return "#" + "".join(f"{round(c + (255 - c) * towards):02x}" for c in rgb)


def _rename(label: str, rank: int, run: str, many_ranks: bool) -> str:
    """``rank 1 smoothed`` -> ``<run> rank 1 smoothed`` (``<run> smoothed`` for one rank);
    a spread curve ``median`` -> ``<run> median``."""
    prefix = f"rank {rank}"
    if rank >= 0 and label.startswith(prefix) and not many_ranks:
        return run + label[len(prefix):]
    return f"{run} {label}"


def _order(per_run: list[list[dict[str, Any]]]) -> list[str]:
    """The panel ids of every run, each run's in its own order: a panel only one run has
    (the spread of a multi-rank run, hardware) goes after the one it follows there."""
    order: list[str] = []
    for panels in per_run:
        previous = None
        for panel in panels:
            if panel["id"] not in order:
                at = order.index(previous) + 1 if previous is not None else 0
                order.insert(at, panel["id"])
            previous = panel["id"]
    return order


def _hlines(found: list[tuple[str, list[dict[str, Any]]]]) -> list[dict[str, Any]]:
    """The threshold lines of each run (label, lines): once when every run has the same,
    else each named after its run."""
    if all(lines == found[0][1] for _, lines in found):
        return found[0][1]
    return [dict(h, label=f"{label}: {h['label']}") for label, lines in found for h in lines]


def overlay(per_run: list[list[dict[str, Any]]], labels: list[str],
            ranks: list[list[int]]) -> list[dict[str, Any]]:
    """One set of panels from each run's (``per_run[i]`` built for run ``labels[i]``, whose
    ranks are ``ranks[i]``), every line carrying ``run`` (its index) and ``colour``; the step
    axis spans every run, so runs of different lengths line up step for step."""
    by_id: dict[str, dict[str, Any]] = {}
    thresholds: dict[str, list[tuple[str, list[dict[str, Any]]]]] = {}
    for index, (panels, label, run_ranks) in enumerate(zip(per_run, labels, ranks,
                                                           strict=True)):
        colour = run_colour(index)
        for panel in panels:
            merged = by_id.setdefault(panel["id"], {
                key: value for key, value in panel.items() if key not in ("lines", "hlines")}
                | {"lines": []})
            thresholds.setdefault(panel["id"], []).append((label, panel.get("hlines") or []))
            for line in panel["lines"]:
                rank = line["rank"]
                spread = line.get("spread")
                merged["lines"].append(dict(
                    line, label=_rename(line["label"], rank, label, len(run_ranks) > 1),
                    run=index,
                    colour=colour if spread or rank not in run_ranks else shade(
                        colour, run_ranks.index(rank), len(run_ranks)),
                    **({"dash": SPREAD_DASH.get(spread, 0)} if spread else {})))
    panels = [by_id[panel_id] for panel_id in _order(per_run)]
    xs = [x for panel in panels for line in panel["lines"] for x in line["x"]]
    for panel in panels:
        if any(lines for _, lines in thresholds[panel["id"]]):
            panel["hlines"] = _hlines(thresholds[panel["id"]])
        panel["x_range"] = [min(xs), max(xs)] if xs else None
        panel["axis"] = panel_axis(panel)
    return panels
