"""The report's recovery section: what on_anomaly "skip" and "rewind" did, per rank.

A rewind is one event on every rank (they go back together), so the table lists each rank's
record: a rank missing from a rewind would show as a gap, which is the point of listing them.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from ..records import Common, Rewind


def recovery_section(scans: Sequence[Any], table: Callable[..., str],
                     cell: Callable[[Any], str]) -> str:
    """``<h2>`` and tables for the withheld updates and rewinds of ``scans`` (``Scanned``
    items); "" when nothing was withheld or rewound. ``table`` and ``cell`` are the page's
    own HTML helpers, so the section looks like the rest."""
    withheld = sum(scanned.scan.skipped_steps for scanned in scans)
    rewinds = [r for scanned in scans for r in scanned.scan.rewinds]
    if not withheld and not rewinds:
        return ""
    events = len({(r.get(Rewind.STEP), r.get(Rewind.TO_STEP)) for r in rewinds})
    parts = [f'<h2 id="recovery">Recovery: {withheld} update(s) withheld, {events} '
             "rewind(s)</h2>"]
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
