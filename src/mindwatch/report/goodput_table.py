"""The report's goodput: the share of the run's wall-clock time that trained the model and the
time lost by cause (runlog/goodput.py), as a small table on a run's page and as a cell of the
table of runs on a page of several."""
from __future__ import annotations

import html
from collections.abc import Callable, Sequence
from typing import Any

from ..basics import format as fmt
from ..runlog.goodput import LABELS, LOST_S, PRODUCTIVE_S, SHARE, WALL_S, goodput


def run_goodput(scans: Sequence[Any]) -> dict[str, Any] | None:
    """The goodput of a run's ``Scanned`` ranks."""
    return goodput([scanned.scan for scanned in scans])


def share_text(figures: dict[str, Any] | None) -> str | None:
    """"93.1% of 2h00m"; None when the logs time nothing."""
    if figures is None:
        return None
    return f"{figures[SHARE] * 100:.1f}% of {fmt.duration(figures[WALL_S])}"


def goodput_section(scans: Sequence[Any], table: Callable[..., str]) -> str:
    """``<h2>`` and a table of the productive time and each cause that lost time, largest
    first, each with its share of the wall-clock time; "" when the logs time nothing."""
    figures = run_goodput(scans)
    if figures is None:
        return ""
    wall = figures[WALL_S]
    lost = sorted(((c, s) for c, s in figures[LOST_S].items() if s > 0), key=lambda p: -p[1])
    rows = [_row("productive (training)", figures[PRODUCTIVE_S], wall)]
    rows += [_row(f"lost: {LABELS.get(cause, cause)}", seconds, wall) for cause, seconds in lost]
    return (f'<h2 id="goodput">Goodput</h2><p>{figures[SHARE] * 100:.1f}% of the '
            f"{html.escape(fmt.duration(wall))} of wall-clock time trained the model "
            "(definition: docs/log-format.md, Goodput).</p>"
            + table(["where the time went", "time", "share of wall-clock"], rows, "goodput"))


def _row(name: str, seconds: float, wall: float) -> str:
    return (f"<tr><td>{html.escape(name)}</td><td>{fmt.duration(seconds)}</td>"
            f"<td>{seconds / wall * 100:.1f}%</td></tr>")
