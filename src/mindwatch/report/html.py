"""``mindwatch report``: one self-contained HTML file (and optional PNGs) from a run log.

The page must open anywhere, offline and years later, so it embeds everything: the data as
strict JSON in a ``<script type="application/json">`` block, and a small plotting script
(``plot.js``, vanilla JS drawing SVG) inlined from the package. Tables are rendered here, in
Python, so they read even with JavaScript off; every text that came from a log goes through
``html.escape`` (a log message is data, never markup).

Each series is downsampled (``downsample.py``) to ``max_points``, which bounds the file size
by the number of ranks and panels, not by the length of the run.
"""
from __future__ import annotations

import gc
import html
import json
import math
import os
import time
from contextlib import contextmanager
from importlib import resources
from operator import itemgetter
from typing import Any, Dict, Iterable, List, Mapping, Optional

from .. import format as fmt
from .. import records
from ..run_dir import write_text_atomically
from ..runlog import RankLog, RunLog
from .downsample import downsample

# The anomaly table (and the markers) stop here: a run that logged an anomaly per step for a
# million steps would otherwise defeat the size bound; the rest stay in the log.
MAX_ANOMALY_ROWS = 2000
_esc = html.escape


_STEP_FIELDS = ("step", "loss", "loss_smooth", "lr", "grad_norm", "step_time_s", "samples_per_s")


def _scan(log: RankLog) -> Dict[str, Any]:
    """One pass over a rank's records (a million-step log is scanned once, not per view):
    step fields as columns, and hardware samples placed at the last step logged before them,
    so that every panel shares the step axis."""
    steps: List[Dict[str, Any]] = []
    hardware: List[tuple] = []
    anomalies: List[Dict[str, Any]] = []
    run = None
    for rec in log.records:
        kind = rec.get("kind")
        if kind == records.STEP:
            steps.append(rec)
        elif kind == records.HARDWARE:
            hardware.append((len(steps), rec))
        elif kind == records.ANOMALY:
            anomalies.append(rec)
        elif kind == records.RUN:
            run = rec
    try:   # itemgetter and zip run in C: several times faster than a .get per field
        columns = zip(*map(itemgetter(*_STEP_FIELDS), steps)) if steps else [[]] * 7
        scan: Dict[str, Any] = {name: list(col) for name, col in zip(_STEP_FIELDS, columns)}
    except KeyError:       # an optional field missing somewhere: one .get at a time
        scan = {name: [r.get(name) for r in steps] for name in _STEP_FIELDS}
    hw: Dict[str, List[Any]] = {"x": [], "cpu_percent": [], "mem_used_gb": [], "rss_gb": []}
    devices: Dict[str, Dict[str, List[Any]]] = {}
    for count, rec in hardware:
        x = scan["step"][count - 1] if count else 0
        hw["x"].append(x)
        for name in ("cpu_percent", "mem_used_gb", "rss_gb"):
            hw[name].append(rec.get(name))
        for dev in rec.get("devices") or ():
            series = devices.setdefault(f"{dev.get('type', 'dev')}{dev.get('index', 0)}", {
                "x": [], "util_percent": [], "mem_used_mb": [], "temp_c": []})
            series["x"].append(x)
            for name in ("util_percent", "mem_used_mb", "temp_c"):
                series[name].append(dev.get(name))
    scan.update(hardware=hw, devices=devices, anomalies=anomalies, run=run, log=log)
    return scan


@contextmanager
def _gc_paused():
    """The cyclic GC pauses while a report is built: with millions of log records alive, each
    collection walks them all, and building columns triggers thousands of collections (2x the
    run time). Nothing built here forms reference cycles, so nothing is left to collect."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def _settings(scans: List[Dict[str, Any]]) -> Dict[str, Any]:
    """The first rank's ``run`` record (the latest segment): config, versions, thresholds."""
    return next((scan["run"] for scan in scans if scan["run"] is not None), {})


def _line(label: str, rank: int, xs, ys, n: int, keep, **style: Any) -> Dict[str, Any]:
    x, y = downsample(xs, ys, n, keep)
    return {"label": label, "rank": rank, "x": x, "y": y, **style}


def _spread(scans: List[Dict[str, Any]], name: str, n: int) -> List[Dict[str, Any]]:
    """Min / median / max across ranks at each step (finite values only)."""
    columns = [scan[name] for scan in scans]
    first = scans[0]["step"]
    if all(scan["step"] == first for scan in scans) and all(
            None not in col and math.isfinite(sum(col)) for col in columns):
        # Usual case, same steps everywhere and all finite: whole columns through C builtins.
        steps, rows = first, list(map(sorted, zip(*columns)))
    else:
        by_step: Dict[Any, List[float]] = {}
        for scan in scans:
            for step, value in zip(scan["step"], scan[name]):
                if value is not None and math.isfinite(value):
                    by_step.setdefault(step, []).append(value)
        steps = sorted(by_step)
        rows = [sorted(by_step[step]) for step in steps]
    stats = {"min": [row[0] for row in rows], "max": [row[-1] for row in rows],
             "median": [row[len(row) // 2] if len(row) % 2 else
                        (row[len(row) // 2 - 1] + row[len(row) // 2]) / 2 for row in rows]}
    return [_line(stat, -1, steps, stats[stat], n, (), spread=stat)
            for stat in ("min", "median", "max")]


def build_panels(run: RunLog, max_points: int = 2000,
                 scans: Optional[List[Dict[str, Any]]] = None) -> List[Dict[str, Any]]:
    """Every panel of the report as plain data: title, axis options, downsampled lines."""
    scans = scans if scans is not None else [_scan(log) for log in run.ranks]
    config = _settings(scans).get("config") or {}
    keeps = [{a.get("step") for a in scan["anomalies"][:MAX_ANOMALY_ROWS]} for scan in scans]
    n = max_points

    def per_rank_lines(name: str, **style: Any) -> List[Dict[str, Any]]:
        return [_line(f"rank {scan['log'].rank}", scan["log"].rank, scan["step"], scan[name], n,
                      keep, **style) for scan, keep in zip(scans, keeps)]

    def hlines(*pairs) -> List[Dict[str, Any]]:
        return [{"y": config[key], "label": f"{key} {config[key]:g}"}
                for key in pairs if isinstance(config.get(key), (int, float))]

    loss_lines: List[Dict[str, Any]] = []
    for scan, keep in zip(scans, keeps):
        rank = scan["log"].rank
        loss_lines.append(_line(f"rank {rank} loss", rank, scan["step"], scan["loss"], n, keep,
                                faint=True))
        loss_lines.append(_line(f"rank {rank} smoothed", rank, scan["step"], scan["loss_smooth"],
                                n, keep))
    panels = [
        {"id": "loss", "title": "Loss (faint) and smoothed loss", "log": "auto",
         "lines": loss_lines},
        {"id": "lr", "title": "Learning rate", "lines": per_rank_lines("lr")},
        {"id": "grad_norm", "title": "Gradient norm (global L2, before clipping)", "log": True,
         "hlines": hlines("grad_explode", "grad_vanish"), "lines": per_rank_lines("grad_norm")},
        {"id": "step_time", "title": "Step time (s)", "log": "auto",
         "lines": per_rank_lines("step_time_s")},
        {"id": "throughput", "title": "Throughput (samples/s)",
         "lines": per_rank_lines("samples_per_s")},
    ]
    if len(scans) > 1:
        panels.append({"id": "spread_loss", "title": "Loss across ranks (min / median / max)",
                       "log": "auto", "lines": _spread(scans, "loss", n)})
        panels.append({"id": "spread_step_time", "log": "auto",
                       "title": "Step time across ranks (min / median / max, s)",
                       "lines": _spread(scans, "step_time_s", n)})
    if any(scan["hardware"]["x"] for scan in scans):
        panels += _hardware_panels(scans, n, hlines("max_temperature_c"))
    # One step axis for every panel, so a hardware curve lines up with the loss above it.
    xs = [x for panel in panels for line in panel["lines"] for x in line["x"]]
    for panel in panels:
        panel["markers"] = True            # anomalies are steps: every panel shows them
        panel["x_range"] = [min(xs), max(xs)] if xs else None
    return panels


def _hardware_panels(scans, n: int, temp_lines) -> List[Dict[str, Any]]:
    def lines(name: str, source: str = "hardware", **style) -> List[Dict[str, Any]]:
        out = []
        for scan in scans:
            rank = scan["log"].rank
            groups = [("", scan["hardware"])] if source == "hardware" else \
                sorted(scan["devices"].items())
            for dash, (device, series) in enumerate(groups):
                out.append(_line(f"rank {rank} {device}".rstrip(), rank, series["x"],
                                 series[name], n, (), dash=dash % 3, **style))
        return out

    host_memory = [dict(line, label=line["label"] + " used") for line in lines("mem_used_gb")]
    host_memory += [dict(line, label=line["label"] + " process RSS", dash=1)
                    for line in lines("rss_gb")]
    panels = [
        {"id": "cpu", "title": "Host CPU (%)", "lines": lines("cpu_percent")},
        {"id": "host_memory", "title": "Host memory used and process RSS (GB)",
         "lines": host_memory},
        {"id": "device_util", "title": "Device utilization (%)", "lines": lines("util_percent",
                                                                                "devices")},
        {"id": "device_memory", "title": "Device memory used (MB)",
         "lines": lines("mem_used_mb", "devices")},
        {"id": "device_temp", "title": "Device temperature (°C)", "hlines": temp_lines,
         "lines": lines("temp_c", "devices")},
    ]
    return [p for p in panels if any(line["x"] for line in p["lines"])]


def _json_block(data: Any) -> str:
    """Strict JSON (NaN/Infinity as strings) that cannot end its <script> element: every '<'
    becomes \\u003c, which JSON.parse reads back unchanged."""
    text = json.dumps(records.to_strict(data), allow_nan=False, ensure_ascii=False,
                      separators=(",", ":"))
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


def _anomaly_rows(run: RunLog, anomalies, link_base: str) -> List[str]:
    rows = []
    for a in anomalies[:MAX_ANOMALY_ROWS]:
        link = fmt.MISSING
        if a.get("report"):
            stem = os.path.splitext(os.path.basename(str(a["report"])))[0]
            target = os.path.join(run.directory, "anomalies", stem + ".md")
            href = os.path.relpath(target, link_base).replace(os.sep, "/")
            link = f'<a href="{_esc(href)}">{_esc(stem)}.md</a>'
        cells = [a.get("step"), a.get("rank"), a.get("anomaly"), a.get("value"),
                 a.get("threshold"), ", ".join(a.get("actions") or [])]
        rows.append(f'<tr data-step="{_esc(str(a.get("step")))}" data-rank="'
                    f'{_esc(str(a.get("rank")))}" data-kind="{_esc(str(a.get("anomaly")))}">'
                    + "".join(f"<td>{_cell(c)}</td>" for c in cells)
                    + f'<td class="msg">{_cell(a.get("message"))}</td><td>{link}</td></tr>')
    return rows


def _rank_rows(scans) -> List[str]:
    rows = []
    for scan in scans:
        log, info, steps = scan["log"], scan["run"] or {}, scan["step"]
        end = log.end
        status = end.get("reason") if end else "no end record (running or crashed)"
        cells = [log.rank, info.get("host"), info.get("pid"), steps[-1] if steps else 0, status,
                 fmt.duration(end.get("elapsed_s")) if end else None, len(scan["anomalies"]),
                 "yes" if log.torn_tail else "no"]
        rows.append("<tr>" + "".join(f"<td>{_cell(c)}</td>" for c in cells) + "</tr>")
    return rows


def _plot_js() -> str:
    return resources.files("mindwatch.report").joinpath("plot.js").read_text(encoding="utf-8")


def render_html(run: RunLog, *, max_points: int = 2000, link_base: Optional[str] = None) -> str:
    """The report page. ``link_base``: the folder the page will be saved in (default: the run
    directory), so links to ``anomalies/*.md`` resolve from there."""
    with _gc_paused():
        scans = [_scan(log) for log in run.ranks]
        panels = build_panels(run, max_points, scans)
    settings = _settings(scans)
    anomalies = [a for scan in scans for a in scan["anomalies"]]
    data = {"panels": panels,
            "anomalies": [{"step": a.get("step"), "rank": a.get("rank"), "kind": a.get("anomaly"),
                           "message": a.get("message")} for a in anomalies[:MAX_ANOMALY_ROWS]]}
    info_keys = ("world_size", "total_steps", "mode", "device_target", "dataset_sink_mode",
                 "wrapped", "argv", "schema")
    info = [(k, settings.get(k)) for k in info_keys if k in settings]
    info += [(f"version.{k}", v) for k, v in (settings.get("versions") or {}).items()]
    pairs = info + list(_flatten("", settings.get("config") or {}))
    config_rows = [f"<tr><td>{_esc(str(k))}</td><td>{_cell(v)}</td></tr>" for k, v in pairs]
    more = len(anomalies) - MAX_ANOMALY_ROWS
    title = f"mindwatch report: {run.directory}"
    verdict = f"{len(anomalies)} anomalies" if anomalies else "no anomalies"
    parts = [
        "<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{_esc(title)}</title>", f"<style>{_CSS}</style></head><body>",
        '<main id="report" data-rendered="0">', f"<h1>{_esc(title)}</h1>",
        f'<p class="meta">{len(run.ranks)} rank(s), {_esc(verdict)}; generated '
        f'{_esc(time.strftime("%Y-%m-%d %H:%M:%S"))}</p>',
        '<div id="errors" class="errors"></div>',
        "<noscript>The charts need JavaScript; the tables below do not.</noscript>",
        '<div id="panels"></div>', "<h2>Ranks</h2>",
        _table(["rank", "host", "pid", "last step", "end", "elapsed", "anomalies", "torn tail"],
               _rank_rows(scans)),
        f'<h2>Anomalies ({len(anomalies)})</h2>',
        _table(["step", "rank", "kind", "value", "threshold", "actions", "message", "report"],
               _anomaly_rows(run, anomalies, link_base or run.directory), "anomalies")
        if anomalies else "<p>None.</p>",
        f"<p>{more} more anomalies are in the run log.</p>" if more > 0 else "",
        "<h2>Settings and versions</h2>", _table(["setting", "value"], config_rows, "config"),
        "</main>",
        f'<script type="application/json" id="mw-data">{_json_block(data)}</script>',
        # Installed before plot.js runs so even a syntax error there is shown on the page.
        "<script>window.onerror=function(m,s,l,c,e){var d=document.getElementById('errors');"
        "d.textContent+=(e&&e.stack?e.stack:m+' at line '+l)+'\\n';};</script>",
        f"<script>{_plot_js()}</script>", "</body></html>",
    ]
    return "\n".join(parts)


_CSS = """
body{font:14px/1.4 system-ui,-apple-system,'Segoe UI',sans-serif;margin:0;background:#f6f7f9;
  color:#1d2329}
main{max-width:1280px;margin:0 auto;padding:16px 24px}
h1{font-size:20px;margin:8px 0 2px;word-break:break-all}h2{font-size:16px;margin:24px 0 8px}
.meta{color:#5b6670;margin:0 0 12px}
.errors:not(:empty){white-space:pre-wrap;background:#fde8e8;color:#9b1c1c;padding:8px}
.panel{background:#fff;border:1px solid #dde1e5;border-radius:6px;margin:0 0 12px;
  padding:8px 12px}
.panel h3{font-size:14px;margin:0 0 4px}.legend{font-size:12px;color:#444}
.legend span{margin-right:12px;white-space:nowrap}
.legend i{display:inline-block;width:14px;height:3px;margin-right:4px;vertical-align:middle}
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
