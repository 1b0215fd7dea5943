"""``mindwatch report``: one self-contained HTML file (and optional PNGs) from a run log.

The page must open anywhere, offline and years later, so it embeds everything: the data as
strict JSON in a ``<script type="application/json">`` block, and a small plotting script
(``plot.js``, vanilla JS drawing SVG) inlined from the package. Tables are rendered here, in
Python, so they read even with JavaScript off; every text that came from a log goes through
``html.escape`` (a log message is data, never markup).

The charts' data comes from ``panels.py``, downsampled, so the file size is bounded by the
number of ranks and panels, not by the length of the run. A job of more than
``MAX_RANK_CURVES`` ranks gets the job page instead (job/page.py): the spread across
ranks and a few named ranks, so its size does not grow with the ranks either.
"""
from __future__ import annotations

import html
import json
import os
import time
from collections.abc import Iterable, Mapping
from importlib import resources
from typing import Any

from .. import records
from ..anomaly import HANG
from ..basics import format as fmt
from ..basics.run_dir import write_text_atomically
from ..events import Event, counts, event_line, group
from ..job_schema import JOB_FILE
from ..records import Anomaly, Common, End, Run, Step
from ..runlog import RunLog
from .bad_batches_text import bad_batches_section
from .goodput_table import goodput_section
from .heatmaps import build_heatmaps
from .panels import MAX_ANOMALY_ROWS, Scanned, build_panels, gc_paused, run_settings, scan_logs
from .recovery import recovery_section
from .summary import hang_text, skipped_note
from .watched import run_not_watched

_esc = html.escape
_STRICT = json.JSONEncoder(allow_nan=False, ensure_ascii=False, separators=(",", ":"))


def _json_block(data: Any) -> str:
    """Strict JSON (NaN/Infinity as strings) that cannot end its <script> element: every '<'
    becomes \\u003c, which JSON.parse reads back unchanged."""
    try:      # usually every number is finite: no need to walk the data for one that is not
        text = _STRICT.encode(data)
    except ValueError:
        text = _STRICT.encode(records.to_strict(data))
    return text.replace("<", "\\u003c").replace("\u2028", "\\u2028").replace("\u2029", "\\u2029")


def _flatten(prefix: str, value: Any) -> Iterable[tuple]:
    if isinstance(value, Mapping) and value:
        for key, item in value.items():
            yield from _flatten(f"{prefix}.{key}" if prefix else str(key), item)
    else:
        yield prefix, value


def _cell(value: Any) -> str:
    if isinstance(value, float):
        return _esc(fmt.number(value))
    if value is None:
        return fmt.MISSING
    return _esc(value if isinstance(value, str) else json.dumps(value, default=str))


def _table(headers: Iterable[str], rows: Iterable[str], css: str = "") -> str:
    head = "".join(f"<th>{_esc(h)}</th>" for h in headers)
    return f'<table class="{css}"><thead><tr>{head}</tr></thead><tbody>{"".join(rows)}</tbody>' \
           "</table>"


# Up to this many ranks a page draws each rank's curves; beyond, the job page (a band of the
# spread across ranks and a few named ranks' curves: job/page.py).
MAX_RANK_CURVES = 4

# The anomaly table's columns: one row per event (a step's anomalies on one rank).
EVENT_COLUMNS = ["step", "rank", "event", "report"]


def scan_events(scans: list[Scanned]) -> list[Event]:
    """The anomalies of ``scans`` as events (``mindwatch.events``), rank by rank, each
    segment's apart (a resumed run may log a step twice)."""
    return [event for scanned in scans for segment in scanned.scan.segments
            for event in group(segment.anomalies)]


def _event_rows(run: RunLog, events: list[Event], link_base: str, label: str | None = None
                ) -> list[str]:
    """The anomaly table's rows, one per event, its line as the console prints it;
    ``label``: the run's, a first cell (a page of several runs). ``data-kind`` holds the
    event's kinds, separated by spaces."""
    rows = []
    first = "" if label is None else f"<td>{_esc(label)}</td>"
    run_attr = "" if label is None else f' data-run="{_esc(label)}"'

    for event in events[:MAX_ANOMALY_ROWS]:
        link = fmt.MISSING
        if event.report:
            stem = os.path.splitext(os.path.basename(str(event.report)))[0]
            target = os.path.join(run.directory, "anomalies", stem + ".md")
            href = os.path.relpath(target, link_base).replace(os.sep, "/")
            link = f'<a href="{_esc(href)}">{_esc(stem)}.md</a>'
        step, rank = event.step, event.rank
        rows.append(f'<tr{run_attr} data-step="{_esc(str(step))}" '
                    f'data-rank="{_esc(str(rank))}" data-kind="{_esc(" ".join(event.kinds))}">'
                    + first + f"<td>{_cell(step)}</td><td>{_cell(rank)}</td>"
                    + f'<td class="msg">{_cell(event_line(event))}</td><td>{link}</td></tr>')
    return rows


def _rank_rows(scans: list[Scanned], label: str | None = None) -> list[str]:
    rows = []
    first = "" if label is None else f"<td>{_esc(label)}</td>"
    for scanned in scans:
        log, scan = scanned.log, scanned.scan
        info, steps, end = scan.run or {}, scan.steps[Step.STEP], scan.end
        status = end.get(End.REASON) if end else "no end record (running or crashed)"
        cells = [log.rank, info.get(Run.HOST), info.get(Run.PID), steps[-1] if steps else 0,
                 status, fmt.duration(end.get(End.ELAPSED_S)) if end else None,
                 len(scan.anomalies), "yes" if log.torn_tail else "no", log.skipped]
        rows.append("<tr>" + first + "".join(f"<td>{_cell(c)}</td>" for c in cells) + "</tr>")
    return rows


def _skipped_note(runs: list[tuple[str, RunLog]]) -> str:
    """A visible warning that the page leaves out lines of the logs it could not read; each
    run's ranks named after the run (label "": a page of one run)."""
    notes = [f"{label} rank {log.rank}".lstrip() + f": {skipped_note(log.skipped, log.skipped_at)}"
             for label, run in runs for log in run.ranks if log.skipped]
    if not notes:
        return ""
    return ('<p class="skipped" id="skipped">Some log lines could not be read (torn by a '
            "crash or a full disk, or not run-log records) and are left out; the page shows "
            f"every other record. {_esc('; '.join(notes))}.</p>")


def settings_pairs(settings: Mapping[str, Any]) -> list[tuple[str, Any]]:
    """The settings table's rows, ``(name, value)``, from a ``run`` record."""
    info_keys = (Run.WORLD_SIZE, Run.TOTAL_STEPS, Run.MODE, Run.DEVICE_TARGET,
                 Run.DATASET_SINK_MODE, Run.WRAPPED, Run.ARGV, Run.SCHEMA)
    info = [(k, settings.get(k)) for k in info_keys if k in settings]
    info += [(f"version.{k}", v) for k, v in (settings.get(Run.VERSIONS) or {}).items()]
    return info + list(_flatten("", settings.get(Run.CONFIG) or {}))


def _hung_note(runs: Iterable[tuple[str, Iterable[Mapping[str, Any]]]]) -> str:
    """The ranks that hung and where their training thread waited, above the charts: one
    item per hang, prefixed by its run's label on a page of several runs (label "": a page
    of one run). ``runs``: ``(label, anomalies)`` pairs."""
    hangs = [(label, a) for label, anomalies in runs for a in anomalies
             if a.get(Anomaly.ANOMALY) == HANG]
    if not hangs:
        return ""
    items = "".join(f"<li>{_esc(f'{label}: ' if label else '')}{_esc(hang_text(h))}</li>"
                    for label, h in hangs[:MAX_ANOMALY_ROWS])
    return f'<div class="hung" id="hung"><p>Hung (no step ended for the timeout):</p>' \
           f"<ul>{items}</ul></div>"


def _script(name: str) -> str:
    return resources.files("mindwatch.report").joinpath(name).read_text(encoding="utf-8")


def _job_view(run: RunLog) -> Any:
    """The ``JobView`` to draw the job page from (its job log's, else condensed from the
    rank logs), or None: a run of at most ``MAX_RANK_CURVES`` ranks. A run of one rank
    imports nothing more (numpy is not loaded: ``report`` runs in little memory)."""
    if os.path.lexists(os.path.join(run.directory, JOB_FILE)):
        from ..runlog.job.view import read_job
        view = read_job(run.directory)
        if view is not None and view.world_size > MAX_RANK_CURVES:
            return view
    if len(run.ranks) > MAX_RANK_CURVES:
        from ..runlog.job.view import condense
        return condense(run)
    return None


def render_html(run: RunLog, *, max_points: int = 2000, link_base: str | None = None) -> str:
    """The report page. ``link_base``: the folder the page will be saved in (default: the run
    directory), so links to ``anomalies/*.md`` resolve from there. A job of more than a few
    ranks gets the job page (job/page.py: spreads, named ranks, heatmaps of ranks),
    from its job log, else condensed from its rank logs."""
    view = _job_view(run)
    if view is not None:
        from .job.page import render_job_html
        with gc_paused():
            return render_job_html(view, {log.rank: log for log in run.ranks},
                                   max_points=max_points, link_base=link_base)
    with gc_paused():
        scans = scan_logs(run)
        panels = build_panels(run, max_points, scans)
        anomalies = [a for scanned in scans for a in scanned.scan.anomalies]
        events = scan_events(scans)
        heatmaps = build_heatmaps(scans, anomalies)
    pairs = settings_pairs(run_settings(scans))
    data = {"panels": panels, "heatmaps": heatmaps,
            "anomalies": [{Anomaly.STEP: a.get(Anomaly.STEP), Common.RANK: a.get(Common.RANK),
                           "kind": a.get(Anomaly.ANOMALY),
                           Anomaly.MESSAGE: a.get(Anomaly.MESSAGE)}
                          for a in anomalies[:MAX_ANOMALY_ROWS]]}
    config_rows = [f"<tr><td>{_esc(str(k))}</td><td>{_cell(v)}</td></tr>" for k, v in pairs]
    more = len(events) - MAX_ANOMALY_ROWS
    title = f"mindwatch report: {run.directory}"
    verdict = f"{len(anomalies)} anomalies" if anomalies else "no anomalies"
    unwatched = run_not_watched([(scanned.rank, scanned.scan) for scanned in scans])
    verdict += f", {unwatched}" if unwatched else ""
    parts = [
        "<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{_esc(title)}</title>", f"<style>{_CSS}</style></head><body>",
        '<main id="report" data-rendered="0">', f"<h1>{_esc(title)}</h1>",
        f'<p class="meta">{fmt.count(len(run.ranks), "rank")}, {_esc(verdict)}; generated '
        f'{_esc(time.strftime("%Y-%m-%d %H:%M:%S"))}</p>',
        _skipped_note([("", run)]), _hung_note([("", anomalies)]),
        '<div id="errors" class="errors"></div>',
        "<noscript>The charts need JavaScript; the tables below do not.</noscript>",
        '<div id="panels"></div>',
        '<h2>Inside the model</h2><div id="heatmaps"></div>' if heatmaps else "",
        "<h2>Ranks</h2>",
        _table(["rank", "host", "pid", "last step", "end", "elapsed", "anomalies", "torn tail",
                "skipped lines"],
               _rank_rows(scans)),
        f'<h2>Anomalies ({_esc(counts(len(anomalies), len(events)))})</h2>',
        _table(EVENT_COLUMNS, _event_rows(run, events, link_base or run.directory),
               "anomalies") if anomalies else "<p>None.</p>",
        f"<p>{more} more events are in the run log.</p>" if more > 0 else "",
        recovery_section(scans, _table, _cell),
        bad_batches_section(run.directory, _table, _esc),
        goodput_section(scans, _table),
        "<h2>Settings and versions</h2>", _table(["setting", "value"], config_rows, "config"),
        "</main>",
        *page_scripts(data, heatmaps=bool(heatmaps)),
    ]
    return "\n".join(parts)


def page_scripts(data: Any, *, heatmaps: bool) -> list[str]:
    """The end of a report page: its data, the error catcher, the drawing scripts."""
    return [
        f'<script type="application/json" id="mw-data">{_json_block(data)}</script>',
        # Installed before plot.js runs so even a syntax error there is shown on the page.
        "<script>window.onerror=function(m,s,l,c,e){var d=document.getElementById('errors');"
        "d.textContent+=(e&&e.stack?e.stack:m+' at line '+l)+'\\n';};</script>",
        f"<script>{_script('plot.js')}</script>",
        f"<script>{_script('heatmap.js')}</script>" if heatmaps else "", "</body></html>"]


_CSS = """
body{font:14px/1.4 system-ui,-apple-system,'Segoe UI',sans-serif;margin:0;background:#f6f7f9;
  color:#1d2329}
main{max-width:1280px;margin:0 auto;padding:16px 24px}
h1{font-size:20px;margin:8px 0 2px;word-break:break-all}h2{font-size:16px;margin:24px 0 8px}
.meta{color:#5b6670;margin:0 0 12px}
.skipped,.hung{background:#fff4d6;border:1px solid #e0b84c;color:#6b4e00;padding:6px 10px}
.errors:not(:empty){white-space:pre-wrap;background:#fde8e8;color:#9b1c1c;padding:8px}
.panel{background:#fff;border:1px solid #dde1e5;border-radius:6px;margin:0 0 12px;
  padding:8px 12px}
.panel h3{font-size:14px;margin:0 0 4px}.legend{font-size:12px;color:#444}
.legend span{margin-right:12px;white-space:nowrap}
.legend i{display:inline-block;width:14px;height:3px;margin-right:4px;vertical-align:middle}
.legend .scale{display:inline-block;width:160px;height:10px;vertical-align:middle}
.panel svg{display:block;width:100%;height:auto}.nodata{color:#8a949c;font-style:italic}
table{border-collapse:collapse;background:#fff;font-size:13px;width:100%}
th,td{border:1px solid #dde1e5;padding:3px 8px;text-align:left;vertical-align:top}
th{background:#eef1f4}td{word-break:break-word}
table.anomalies td{white-space:nowrap}table.anomalies td.msg{white-space:normal;width:60%}
table.config{width:auto}table.config td:first-child{font-family:monospace}
.tip{position:absolute;pointer-events:none;background:rgba(255,255,255,.95);border:1px solid #aab;
  padding:4px 6px;font-size:12px;border-radius:4px;white-space:pre}
"""


def write_html(run: RunLog, path: str, *, max_points: int = 2000) -> str:
    """Render and write the report to ``path`` under a temporary name, then rename it, so a
    browser never opens half a report. Links to anomaly reports stay relative to ``path``."""
    write_text_atomically(path, render_html(
        run, max_points=max_points, link_base=os.path.dirname(os.path.abspath(path))))
    return path
