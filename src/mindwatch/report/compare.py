"""``mindwatch report RUN_DIR RUN_DIR ...``: several runs on one self-contained page, to
compare them: every curve of every run drawn over the others on one step axis
(``overlay.py``), a table of the runs (``runs.py``), and the ranks, anomalies, hangs,
recovery (withheld updates, rewinds) and settings of each run, each naming its run. The page
is built like a one-run page (``html.py``): data embedded as strict JSON, ``plot.js``
inlined, text from the logs escaped.

Each run is scanned and downsampled as on a page of its own, so the page grows with the
number of runs, never with their length.
"""
from __future__ import annotations

import html
import os
import time
from typing import Any

from ..basics import format as fmt
from ..basics.run_dir import write_text_atomically
from ..events import counts
from ..records import Anomaly, Common
from ..runlog import RunLog
from . import html as page  # the building blocks of a one-run page: one look for both
from .goodput_table import run_goodput, share_text
from .overlay import overlay, run_colour
from .panels import MAX_ANOMALY_ROWS, Scanned, build_panels, gc_paused, run_settings, scan_logs
from .png import draw_pngs, marked_steps
from .recovery import comparison_recovery
from .runs import RunRow, run_row
from .watched import run_not_watched

_esc = html.escape
_MISSING = object()     # a setting a run does not have, told apart from a null value


def compare_panels(runs: list[RunLog], labels: list[str], max_points: int,
                   scans: list[list[Scanned]]) -> list[dict[str, Any]]:
    return overlay([build_panels(run, max_points, found) for run, found in zip(runs, scans,
                                                                                strict=True)],
                   labels, [[log.rank for log in run.ranks] for run in runs])


def _swatch(index: int) -> str:
    return f'<i class="swatch" style="background:{run_colour(index)}"></i>'


def _cells(*values: Any) -> str:
    return "".join(f"<td>{page._cell(value)}</td>" for value in values)


def _run_rows(rows: list[RunRow], goodputs: list[str | None]) -> list[str]:
    out = []
    for index, (row, goodput) in enumerate(zip(rows, goodputs, strict=True)):
        # The exact logged value rides along in data-value; the cell shows it as the charts do.
        loss = f"<td>{fmt.MISSING}</td>" if row.final_loss is None else (
            f'<td data-value="{row.final_loss!r}" title="at step {row.final_loss_step}">'
            f"{page._cell(row.final_loss)}</td>")
        out.append(f'<tr data-run="{_esc(row.label)}"><td>{_swatch(index)}{_esc(row.label)}'
                   f"</td>{_cells(row.ranks, row.last_step)}{loss}"
                   f"{_cells(fmt.duration(row.elapsed_s), goodput, row.end, row.anomalies)}"
                   f"{_cells(row.kinds_text() or None)}</tr>")
    return out


def _settings_rows(scans: list[list[Scanned]]) -> list[str]:
    """One row per setting, one column per run; a row whose runs differ is highlighted."""
    per_run = [dict(page.settings_pairs(run_settings(found))) for found in scans]
    names = list(dict.fromkeys(name for pairs in per_run for name in pairs))
    rows = []
    for name in names:
        values = [pairs.get(name, _MISSING) for pairs in per_run]
        differs = any(v != values[0] for v in values)
        cells = "".join(f"<td>{fmt.MISSING}</td>" if v is _MISSING else _cells(v)
                        for v in values)
        css = ' class="differs"' if differs else ""
        rows.append(f"<tr{css}><td>{_esc(name)}</td>{cells}</tr>")
    return rows


def render_compare(runs: list[RunLog], labels: list[str], *, max_points: int = 2000,
                   link_base: str | None = None) -> str:
    """The page of several runs, ``labels[i]`` naming ``runs[i]``. ``link_base``: the folder
    the page will be saved in (default: the current one), for links to anomaly reports."""
    with gc_paused():
        scans = [scan_logs(run) for run in runs]
        panels = compare_panels(runs, labels, max_points, scans)
    base = link_base or os.getcwd()
    anomalies = [[a for scanned in found for a in scanned.scan.anomalies] for found in scans]
    total = sum(map(len, anomalies))
    data = {"panels": panels,
            "runs": [{"label": label, "colour": run_colour(i)} for i, label in enumerate(labels)],
            "anomalies": [{Anomaly.STEP: a.get(Anomaly.STEP), Common.RANK: a.get(Common.RANK),
                           "kind": a.get(Anomaly.ANOMALY), Anomaly.MESSAGE: a.get(Anomaly.MESSAGE),
                           "run": index}
                          for index, found in enumerate(anomalies)
                          for a in found[:MAX_ANOMALY_ROWS]]}
    rows = [run_row(label, found) for label, found in zip(labels, scans, strict=True)]
    events = [page.scan_events(found) for found in scans]
    anomaly_rows = [row for label, run, found in zip(labels, runs, events, strict=True)
                    for row in page._event_rows(run, found, base, label)]
    more = [f"{label}: {len(found) - MAX_ANOMALY_ROWS}" for label, found in
            zip(labels, events, strict=True) if len(found) > MAX_ANOMALY_ROWS]
    title = "mindwatch report: " + " vs ".join(labels)
    verdict = f"{total} anomalies" if total else "no anomalies"
    unwatched = [f"{label} {text}" for label, found in zip(labels, scans, strict=True)
                 if (text := run_not_watched([(s.rank, s.scan) for s in found]))]
    verdict += "".join(f", {text}" for text in unwatched)
    ranks = sum(len(run.ranks) for run in runs)
    parts = [
        "<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{_esc(title)}</title>", f"<style>{page._CSS}{_COMPARE_CSS}</style></head><body>",
        '<main id="report" data-rendered="0">', f"<h1>{_esc(title)}</h1>",
        f'<p class="meta">{len(runs)} runs, {fmt.count(ranks, "rank")}, {_esc(verdict)}; generated '
        f'{_esc(time.strftime("%Y-%m-%d %H:%M:%S"))}</p>',
        page._skipped_note(list(zip(labels, runs, strict=True))),
        page._hung_note(zip(labels, anomalies, strict=True)),
        '<div id="errors" class="errors"></div>',
        "<noscript>The charts need JavaScript; the tables do not.</noscript>",
        "<h2>Runs</h2>",
        page._table(["run", "ranks", "last step", "final loss", "elapsed", "goodput", "end",
                     "anomalies", "kinds"],
                    _run_rows(rows, [share_text(run_goodput(found)) for found in scans]), "runs"),
        '<div id="panels"></div>', "<h2>Ranks</h2>",
        page._table(["run", "rank", "host", "pid", "last step", "end", "elapsed", "anomalies",
                "torn tail", "skipped lines"],
               [row for label, found in zip(labels, scans, strict=True)
                for row in page._rank_rows(found, label)]),
        f"<h2>Anomalies ({_esc(counts(total, sum(map(len, events))))})</h2>",
        page._table(["run", *page.EVENT_COLUMNS], anomaly_rows, "anomalies") if total
        else "<p>None.</p>",
        f"<p>More events are in the run logs ({_esc(', '.join(more))}).</p>" if more else "",
        comparison_recovery(labels, scans, page._table, page._cell),
        "<h2>Settings and versions</h2>",
        "<p>Rows where the runs differ are highlighted.</p>",
        page._table(["setting", *labels], _settings_rows(scans), "config"),
        "</main>",
        f'<script type="application/json" id="mw-data">{page._json_block(data)}</script>',
        "<script>window.onerror=function(m,s,l,c,e){var d=document.getElementById('errors');"
        "d.textContent+=(e&&e.stack?e.stack:m+' at line '+l)+'\\n';};</script>",
        f"<script>{page._script('plot.js')}</script>", "</body></html>",
    ]
    return "\n".join(parts)


_COMPARE_CSS = """
.swatch{display:inline-block;width:14px;height:10px;margin-right:6px;vertical-align:middle}
table.runs{margin-bottom:16px}table.config tr.differs td{background:#fff4d6}
"""


def write_compare(runs: list[RunLog], labels: list[str], path: str, *,
                  max_points: int = 2000) -> str:
    """Render and write the page of several runs to ``path`` atomically (as ``write_html``)."""
    write_text_atomically(path, render_compare(
        runs, labels, max_points=max_points, link_base=os.path.dirname(os.path.abspath(path))))
    return path


def write_compare_pngs(runs: list[RunLog], labels: list[str], out_dir: str, *,
                       width: int = 1000, height: int = 360) -> list[str]:
    """The main panels with every run drawn over the others, as PNG files (``png.py``)."""
    with gc_paused():
        scans = [scan_logs(run) for run in runs]
        panels = {p["id"]: p for p in compare_panels(runs, labels, width, scans)}
    return draw_pngs(panels, marked_steps([s for found in scans for s in found]), out_dir,
                     width=width, height=height)
