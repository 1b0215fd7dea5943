"""The report page of a job of more than ``MAX_RANK_CURVES`` ranks (issue #43): one answer for
the job, whatever its number of ranks, from its ``JobView`` (runlog/job/view.py).

Where a page of a few ranks draws each rank's curve, this one draws each quantity's spread
across ranks with the curves of the few named ranks (charts.py), the ranks-by-steps
heatmaps (heatmap.py), and lists one row per job event (its ranks as a rank set,
its origin rank with host and device), the named ranks, the hosts, the goodput and the
settings. The page's size does not grow with the ranks or the steps.

``job_report`` reads ``job.jsonl`` and the named ranks' logs, never the others: a
4096-rank x 200k-step job within seconds (benchmarks/job_report.py). ``render_html`` of a
run already read (every rank's log) draws the same page, from its job log, else condensed
from the rank logs.
"""
from __future__ import annotations

import html
import os
import time
from collections.abc import Mapping
from typing import Any

from ...basics import format as fmt
from ...basics.run_dir import rank_log_path, write_text_atomically
from ...job_schema import Event, JobHang
from ...runlog import RankLog, RunLogError, read_rank_log
from ...runlog.goodput import LABELS, LOST_S, PRODUCTIVE_S, SHARE, WALL_S
from ...runlog.job.view import JobView
from ..bad_batches_text import bad_batches_section
from ..html import _CSS, MAX_RANK_CURVES, _cell, _table, page_scripts, settings_pairs
from ..panels import MAX_ANOMALY_ROWS, gc_paused
from .charts import build_job_panels, event_steps, named_ranks, place_label
from .heatmap import build_rank_heatmaps

MAX_HOST_ROWS = 1000     # the hosts table stops here (a job of 1000 hosts: 8000 devices)
MAX_SILENT_LINES = 20    # silent ranks named one per line, the rest as a rank set
_esc = html.escape
EVENT_COLUMNS = ["step", "kinds", "ranks", "origin", "actions", "message", "report"]


def job_page_wanted(world_size: int) -> bool:
    return world_size > MAX_RANK_CURVES


def _read_named(path: str, rank: int, *, states: bool, lr_rank: int) -> RankLog:
    # only the LR's rank keeps the chart-only columns (the LR): the others' scans ~30% faster
    return read_rank_log(path, rank, states=states, charts=rank == lr_rank)


def read_named_logs(directory: str, ranks: list[int]) -> dict[int, RankLog]:
    """The logs of ``ranks`` that are there and readable (a rank log copied away, or not a run
    log: its curves come from the job's bins instead), read side by side. The first one read
    keeps its LR (the LR chart's), the others only what the job page draws of them."""
    from functools import partial

    from ...runlog.parallel import read_logs

    ranked = [(rank, path) for rank in ranks
              if os.path.isfile(path := rank_log_path(directory, rank))]
    if not ranked:
        return {}
    read = partial(_read_named, lr_rank=ranked[0][0])
    try:
        logs = read_logs(ranked, read, [False] * len(ranked))
    except RunLogError:          # one bad log: read the others one by one
        logs = []
        for rank, path in ranked:
            try:
                logs.append(read(path, rank, states=False))
            except RunLogError:
                continue
    return {log.rank: log for log in logs}


def job_report(directory: str, *, max_points: int = 2000, link_base: str | None = None
               ) -> str | None:
    """The job page of ``directory`` from its ``job.jsonl`` and its named ranks' logs; None
    when it has no job log or one of at most ``MAX_RANK_CURVES`` ranks (the per-rank page
    then: read_run and html.render_html)."""
    from ...runlog.job.view import read_job

    with gc_paused():
        view = read_job(directory)
        if view is None or not job_page_wanted(view.world_size):
            return None
        named = list(named_ranks(view))
        logs = read_named_logs(directory, named)
        return render_job_html(view, logs, max_points=max_points, link_base=link_base)


def write_job_report(directory: str, path: str, *, max_points: int = 2000) -> str | None:
    """``job_report`` written to ``path`` (atomically, as html.write_html); None, and nothing
    written, when it gives no page."""
    page = job_report(directory, max_points=max_points,
                      link_base=os.path.dirname(os.path.abspath(path)))
    if page is None:
        return None
    write_text_atomically(path, page)
    return path


def _origin(view: JobView, event: Mapping[str, Any]) -> str:
    rank = event.get(Event.ORIGIN_RANK)
    if not isinstance(rank, int):
        return fmt.MISSING
    host, device = event.get(Event.ORIGIN_HOST), event.get(Event.ORIGIN_DEVICE)
    if host is None and device is None:
        return _esc(place_label(view, rank))
    where = ", ".join(p for p in (host, None if device is None else f"device {device}") if p)
    return _esc(f"rank {rank} ({where})")


def _report_link(directory: str, report: Any, link_base: str) -> str:
    if not report:
        return fmt.MISSING
    stem = os.path.splitext(os.path.basename(str(report)))[0]
    target = os.path.join(directory, "anomalies", stem + ".md")
    href = os.path.relpath(target, link_base).replace(os.sep, "/")
    return f'<a href="{_esc(href)}">{_esc(stem)}.md</a>'


def _event_rows(view: JobView, link_base: str) -> list[str]:
    """One row per job event (a step on which any rank found an anomaly)."""
    rows = []
    for event in view.events[:MAX_ANOMALY_ROWS]:
        kinds = [str(k) for k in event.get(Event.KINDS) or ()]
        by_kind = event.get(Event.BY_KIND)
        kinds_text = "; ".join(f"{k} on {by_kind[k]}" for k in kinds if k in by_kind) \
            if isinstance(by_kind, Mapping) else ", ".join(kinds)
        ranks, count = event.get(Event.RANKS), event.get(Event.RANK_COUNT)
        ranks_text = f"{ranks} ({fmt.count(count, 'rank')})" if isinstance(count, int) \
            else ranks
        message = str(event.get(Event.MESSAGE) or "")
        verdict = event.get(Event.REPLAY_VERDICT)
        if verdict:
            message += f"; {verdict}"
        actions = "+".join(map(str, event.get(Event.ACTIONS) or ()))
        rows.append(
            f'<tr data-step="{_esc(str(event.get(Event.STEP)))}" '
            f'data-ranks="{_esc(str(ranks))}" data-kind="{_esc(" ".join(kinds))}">'
            f"<td>{_cell(event.get(Event.STEP))}</td><td>{_cell(kinds_text)}</td>"
            f"<td>{_cell(ranks_text)}</td><td>{_origin(view, event)}</td>"
            f"<td>{_cell(actions)}</td><td class=\"msg\">{_cell(message)}</td>"
            f"<td>{_report_link(view.directory, event.get(Event.REPORT), link_base)}</td></tr>")
    return rows


def _named_rows(view: JobView, named: Mapping[int, list[str]],
                logs: Mapping[int, RankLog]) -> list[str]:
    rows = []
    for rank, why in named.items():
        host, device = view.places.get(rank, (None, None))
        log = logs.get(rank)
        source = "its log" if log is not None else "the job's bins (its log is not here)"
        if log is not None and log.skipped:
            source += f"; {fmt.count(log.skipped, 'unreadable line')} skipped"
        cells = [rank, host, device, "; ".join(why), source]
        rows.append(f'<tr data-rank="{rank}">' + "".join(f"<td>{_cell(c)}</td>" for c in cells)
                    + "</tr>")
    return rows


def _hosts(view: JobView) -> tuple[int, list[str]]:
    """The number of hosts and the hosts table's rows, from the latest run record."""
    from ...job_schema import JobRun, Place

    run = view.runs[-1] if view.runs else {}
    found = run.get(JobRun.HOSTS)
    places: list[Any] = found if isinstance(found, list) else []
    rows = [f"<tr><td>{_cell(p.get(Place.HOST))}</td><td>{_cell(p.get(Place.RANKS))}</td>"
            f"<td>{_cell(len(p.get(Place.DEVICES) or ()))}</td></tr>"
            for p in places[:MAX_HOST_ROWS] if isinstance(p, Mapping)]
    return len(places), rows


def _notes(view: JobView) -> str:
    """Above the charts: the stalls, and the ranks whose logs say nothing of an end."""
    parts = []
    if view.hangs:
        items = "".join(
            f"<li>step {_esc(str(h.get(JobHang.STEP)))}: waiting for rank(s) "
            f"{_esc(str(h.get(JobHang.WAITING_FOR)))}: {_esc(str(h.get(JobHang.MESSAGE)))}</li>"
            for h in view.hangs[:MAX_ANOMALY_ROWS])
        parts.append(f'<div class="hung" id="hung"><p>Hung (no step ended for the timeout):'
                     f"</p><ul>{items}</ul></div>")
    if view.skipped_lines:
        parts.append(f'<p class="skipped" id="skipped">{view.skipped_lines} line(s) of the '
                     f"job's log could not be read (torn by a crash or a full disk) and are "
                     "left out; the page shows every other record.</p>")
    if view.silent:
        from ...basics.rank_set import rank_set

        lines = "".join(f"<li>rank {rank}: {_esc(line)}</li>" for rank, line in
                        sorted(view.silent.items())[:MAX_SILENT_LINES])
        parts.append(f'<div class="hung" id="silent"><p>{len(view.silent)} rank(s) with no '
                     f"end record (running, crashed or killed): "
                     f"{_esc(rank_set(view.silent))}</p><ul>{lines}</ul></div>")
    return "".join(parts)


def _goodput(view: JobView) -> str:
    figures = (view.end or {}).get("goodput")
    if not isinstance(figures, Mapping) or not figures.get(WALL_S):
        return ""
    wall = figures[WALL_S]
    lost = sorted(((c, s) for c, s in (figures.get(LOST_S) or {}).items()
                   if isinstance(s, (int, float)) and s > 0), key=lambda p: -p[1])
    rows = [("productive (training)", figures.get(PRODUCTIVE_S) or 0.0)]
    rows += [(f"lost: {LABELS.get(cause, cause)}", seconds) for cause, seconds in lost]
    cells = [f"<tr><td>{_esc(name)}</td><td>{fmt.duration(seconds)}</td>"
             f"<td>{seconds / wall * 100:.1f}%</td></tr>" for name, seconds in rows]
    return (f'<h2 id="goodput">Goodput</h2><p>{figures.get(SHARE, 0) * 100:.1f}% of the '
            f"{_esc(fmt.duration(wall))} of wall-clock time trained the model (rank 0's "
            "figures for the job; docs/log-format.md, Goodput).</p>"
            + _table(["where the time went", "time", "share of wall-clock"], cells, "goodput"))


def render_job_html(view: JobView, logs: Mapping[int, RankLog], *, max_points: int = 2000,
                    link_base: str | None = None) -> str:
    """The job page; ``logs``: the rank logs at hand (only the named ranks' are used)."""
    named = named_ranks(view)
    scans = {rank: logs[rank].scan for rank in named if rank in logs}
    panels = build_job_panels(view, scans, list(named), max_points)
    heatmaps = build_rank_heatmaps(view)
    marked = set(event_steps(view))
    data = {"panels": panels, "heatmaps": heatmaps, "anomalies": [
        {"step": e.get(Event.STEP), "rank": e.get(Event.ORIGIN_RANK)
         if isinstance(e.get(Event.ORIGIN_RANK), int) else e.get(Event.RANKS),
         "kind": ", ".join(map(str, e.get(Event.KINDS) or ())),
         "message": e.get(Event.MESSAGE)} for e in view.events if e.get(Event.STEP) in marked]}
    host_count, host_rows = _hosts(view)
    events = len(view.events)
    title = f"mindwatch report: {view.directory}"
    meta = (f"{fmt.count(view.world_size, 'rank')}"
            + (f" on {fmt.count(host_count, 'host')}" if host_count else "")
            + f", {fmt.count(events, 'job event')}; from {view.source}; generated "
            + time.strftime("%Y-%m-%d %H:%M:%S"))
    more = events - MAX_ANOMALY_ROWS
    parts = [
        "<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{_esc(title)}</title>", f"<style>{_CSS}</style></head><body>",
        '<main id="report" data-rendered="0" data-job="1">', f"<h1>{_esc(title)}</h1>",
        f'<p class="meta">{_esc(meta)}</p>', _notes(view),
        '<div id="errors" class="errors"></div>',
        "<noscript>The charts need JavaScript; the tables below do not.</noscript>",
        "<p>Each chart of a per-rank quantity shows the step's spread across ranks: the band "
        "from min to max, the median line; the named ranks (below) are drawn one by one.</p>",
        '<div id="panels"></div>',
        "<h2>Ranks by steps</h2><p>Each row a group of consecutive ranks, each cell its "
        "largest value over a bin of steps, so one bad rank colours its row; an event is "
        'outlined on its origin rank\'s row.</p><div id="heatmaps"></div>' if heatmaps else "",
        "<h2>Named ranks</h2>",
        _table(["rank", "host", "device", "named because", "curves from"],
               _named_rows(view, named, logs)) if named else "<p>None.</p>",
        f"<h2>Events ({events})</h2>",
        _table(EVENT_COLUMNS, _event_rows(view, link_base or view.directory), "anomalies")
        if events else "<p>None.</p>",
        f"<p>{more} more events are in the job log.</p>" if more > 0 else "",
        bad_batches_section(view.directory, _table, _esc),
        _goodput(view),
        f"<h2>Hosts ({host_count})</h2>" if host_rows else "",
        _table(["host", "ranks", "devices"], host_rows) if host_rows else "",
        "<h2>Settings and versions</h2>",
        _table(["setting", "value"],
               [f"<tr><td>{_esc(str(k))}</td><td>{_cell(v)}</td></tr>"
                for k, v in settings_pairs(view.runs[-1] if view.runs else {})], "config"),
        "</main>",
        *page_scripts(data, heatmaps=bool(heatmaps)),
    ]
    return "\n".join(parts)
