"""The report's recovery section: what on_anomaly "skip" and "rewind" did, per rank.

A rewind is one event on every rank (they go back together), so the table lists each rank's
record: a rank missing from a rewind would show as a gap, which is the point of listing them.
"""
from __future__ import annotations

import html
from collections.abc import Callable, Sequence
from typing import Any

from ..basics import format as fmt
from ..records import Common, Rewind


def recovery_section(scans: Sequence[Any], table: Callable[..., str],
                     cell: Callable[[Any], str], label: str | None = None) -> str:
    """``<h2>`` and tables for the withheld updates and rewinds of ``scans`` (``Scanned``
    items); "" when nothing was withheld or rewound. ``table`` and ``cell`` are the page's
    own HTML helpers, so the section looks like the rest. ``label``: the run's name on a
    page of several runs, where each run's part is an ``<h3>`` under one "Recovery" heading
    (``comparison_recovery``)."""
    withheld = sum(scanned.scan.skipped_steps for scanned in scans)
    rewinds = [r for scanned in scans for r in scanned.scan.rewinds]
    if not withheld and not rewinds:
        return ""
    events = len({(r.get(Rewind.STEP), r.get(Rewind.TO_STEP)) for r in rewinds})
    counts = f"{fmt.count(withheld, 'update')} withheld, {fmt.count(events, 'rewind')}"
    parts = [f'<h2 id="recovery">Recovery: {counts}</h2>' if label is None else
             f'<h3 data-run="{html.escape(label)}">{html.escape(label)}: {counts}</h3>']
    if withheld:
        parts.append(table(["rank", "updates withheld"], [
            f"<tr><td>{cell(s.log.rank)}</td><td>{cell(s.scan.skipped_steps)}</td></tr>"
            for s in scans if s.scan.skipped_steps]))
    if rewinds:
        rows = []
        for r in rewinds:
            cells = [r.get(Rewind.STEP), r.get(Rewind.TO_STEP), r.get(Common.RANK),
                     r.get(Rewind.ANOMALY), r.get(Rewind.ORIGIN_RANK), r.get(Rewind.REWINDS)]
            rows.append(f'<tr data-step="{r.get(Rewind.STEP)}" data-to-step='
                        f'"{r.get(Rewind.TO_STEP)}">'
                        + "".join(f"<td>{cell(c)}</td>" for c in cells) + "</tr>")
        parts.append(table(["at step", "back to step", "rank", "anomaly", "found on rank",
                            "rewinds so far"], rows, "rewinds"))
    return "".join(parts)


def comparison_recovery(labels: Sequence[str], scans: Sequence[Sequence[Any]],
                        table: Callable[..., str], cell: Callable[[Any], str]) -> str:
    """The recovery section of a page of several runs: one part per run that withheld or
    rewound, under one heading; "" when none did."""
    parts = [recovery_section(found, table, cell, label)
             for label, found in zip(labels, scans, strict=True)]
    if not any(parts):
        return ""
    return '<h2 id="recovery">Recovery</h2>' + "".join(parts)
