"""The report's charts as plain data, shared by the HTML page and the PNGs: each rank's log
scanned once into columns, then one panel per chart (title, downsampled lines, threshold
lines, axes from ``axes.py``).

Each series is downsampled (``downsample.py``) to ``max_points``, which bounds the report's
size by the number of ranks and panels, not by the length of the run.
"""
from __future__ import annotations

import gc
from contextlib import contextmanager
from operator import itemgetter
from typing import Any, Dict, List, Optional

from .. import format as fmt
from .. import records
from ..records import Anomaly, Common, Device, Hardware, Run, Step, device_label
from ..runlog import RankLog, RunLog
from .axes import panel_axis
from .downsample import downsample
from .spread import STATS, per_step

# The anomaly table (and the markers) stop here: a run that logged an anomaly per step for a
# million steps would otherwise defeat the size bound; the rest stay in the log.
MAX_ANOMALY_ROWS = 2000

_STEP_FIELDS = (Step.STEP, Step.LOSS, Step.LOSS_SMOOTH, Step.LR, Step.GRAD_NORM, Step.STEP_TIME_S,
                Step.SAMPLES_PER_S)
_HOST_FIELDS = (Hardware.CPU_PERCENT, Hardware.MEM_USED_GB, Hardware.RSS_GB)
_DEVICE_FIELDS = (Device.UTIL_PERCENT, Device.MEM_USED_MB, Device.TEMP_C)
X = "x"             # a hardware series' step positions, beside its field columns


def scan_log(log: RankLog) -> Dict[str, Any]:
    """One pass over a rank's records (a million-step log is scanned once, not per view):
    step fields as columns, and hardware samples placed at the last step logged before them,
    so that every panel shares the step axis."""
    steps: List[Dict[str, Any]] = []
    hardware: List[tuple] = []
    anomalies: List[Dict[str, Any]] = []
    run = None
    for rec in log.records:
        kind = rec.get(Common.KIND)
        if kind == records.STEP:
            steps.append(rec)
        elif kind == records.HARDWARE:
            hardware.append((len(steps), rec))
        elif kind == records.ANOMALY:
            anomalies.append(rec)
        elif kind == records.RUN:
            run = rec
    try:   # itemgetter and zip run in C: several times faster than a .get per field
        columns = (zip(*map(itemgetter(*_STEP_FIELDS), steps)) if steps
                   else [[]] * len(_STEP_FIELDS))
        scan: Dict[str, Any] = {name: list(col) for name, col in zip(_STEP_FIELDS, columns)}
    except KeyError:       # an optional field missing somewhere: one .get at a time
        scan = {name: [r.get(name) for r in steps] for name in _STEP_FIELDS}
    hw: Dict[str, List[Any]] = {name: [] for name in (X, *_HOST_FIELDS)}
    devices: Dict[str, Dict[str, List[Any]]] = {}
    for count, rec in hardware:
        x = scan[Step.STEP][count - 1] if count else 0
        hw[X].append(x)
        for name in _HOST_FIELDS:
            hw[name].append(rec.get(name))
        for dev in rec.get(Hardware.DEVICES) or ():
            series = devices.setdefault(device_label(dev),
                                        {name: [] for name in (X, *_DEVICE_FIELDS)})
            series[X].append(x)
            for name in _DEVICE_FIELDS:
                series[name].append(dev.get(name))
    scan.update(hardware=hw, devices=devices, anomalies=anomalies, run=run, log=log)
    return scan


@contextmanager
def gc_paused():
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


def run_settings(scans: List[Dict[str, Any]]) -> Dict[str, Any]:
    """The first rank's ``run`` record (the latest segment): config, versions, thresholds."""
    return next((scan["run"] for scan in scans if scan["run"] is not None), {})


def _line(label: str, rank: int, xs, ys, n: int, keep, **style: Any) -> Dict[str, Any]:
    """One downsampled curve; ``text`` holds each value as the tooltip shows it."""
    x, y = downsample(xs, ys, n, keep)
    return {"label": label, "rank": rank, "x": x, "y": y, "text": list(map(fmt.number, y)),
            **style}


def _spread(scans: List[Dict[str, Any]], name: str, n: int) -> List[Dict[str, Any]]:
    """Min / median / max across ranks at each step (finite values only)."""
    steps, stats = per_step([scan[Step.STEP] for scan in scans], [scan[name] for scan in scans])
    return [_line(stat, -1, steps, stats[stat], n, (), spread=stat) for stat in STATS]


def build_panels(run: RunLog, max_points: int = 2000,
                 scans: Optional[List[Dict[str, Any]]] = None) -> List[Dict[str, Any]]:
    """Every panel of the report as plain data: title, axis options, downsampled lines."""
    scans = scans if scans is not None else [scan_log(log) for log in run.ranks]
    config = run_settings(scans).get(Run.CONFIG) or {}
    keeps = [{a.get(Anomaly.STEP) for a in scan["anomalies"][:MAX_ANOMALY_ROWS]}
             for scan in scans]
    n = max_points

    def per_rank_lines(name: str, **style: Any) -> List[Dict[str, Any]]:
        return [_line(f"rank {scan['log'].rank}", scan["log"].rank, scan[Step.STEP], scan[name],
                      n, keep, **style) for scan, keep in zip(scans, keeps)]

    def hlines(*pairs) -> List[Dict[str, Any]]:
        return [{"y": config[key], "label": f"{key} {config[key]:g}"}
                for key in pairs if isinstance(config.get(key), (int, float))]

    loss_lines: List[Dict[str, Any]] = []
    for scan, keep in zip(scans, keeps):
        rank = scan["log"].rank
        loss_lines.append(_line(f"rank {rank} loss", rank, scan[Step.STEP], scan[Step.LOSS], n,
                                keep, faint=True))
        loss_lines.append(_line(f"rank {rank} smoothed", rank, scan[Step.STEP],
                                scan[Step.LOSS_SMOOTH], n, keep))
    panels: List[Dict[str, Any]] = [
        {"id": "loss", "title": "Loss (faint) and smoothed loss", "log": "auto",
         "lines": loss_lines},
        {"id": "lr", "title": "Learning rate", "lines": per_rank_lines(Step.LR)},
        {"id": "grad_norm", "title": "Gradient norm (global L2, before clipping)", "log": True,
         "hlines": hlines("grad_explode", "grad_vanish"),
         "lines": per_rank_lines(Step.GRAD_NORM)},
        {"id": "step_time", "title": "Step time (s)", "log": "auto",
         "lines": per_rank_lines(Step.STEP_TIME_S)},
        {"id": "throughput", "title": "Throughput (samples/s)",
         "lines": per_rank_lines(Step.SAMPLES_PER_S)},
    ]
    if len(scans) > 1:
        panels.append({"id": "spread_loss", "title": "Loss across ranks (min / median / max)",
                       "log": "auto", "lines": _spread(scans, Step.LOSS, n)})
        panels.append({"id": "spread_step_time", "log": "auto",
                       "title": "Step time across ranks (min / median / max, s)",
                       "lines": _spread(scans, Step.STEP_TIME_S, n)})
    if any(scan["hardware"][X] for scan in scans):
        panels += _hardware_panels(scans, n, hlines("max_temperature_c"))
    # One step axis for every panel, so a hardware curve lines up with the loss above it.
    xs = [x for panel in panels for line in panel["lines"] for x in line["x"]]
    for panel in panels:
        panel["markers"] = True            # anomalies are steps: every panel shows them
        panel["x_range"] = [min(xs), max(xs)] if xs else None
        panel["axis"] = panel_axis(panel)
    return panels


def _hardware_panels(scans, n: int, temp_lines) -> List[Dict[str, Any]]:
    def lines(name: str, source: str = "hardware", **style) -> List[Dict[str, Any]]:
        out = []
        for scan in scans:
            rank = scan["log"].rank
            groups = [("", scan["hardware"])] if source == "hardware" else \
                sorted(scan["devices"].items())
            for dash, (device, series) in enumerate(groups):
                out.append(_line(f"rank {rank} {device}".rstrip(), rank, series[X],
                                 series[name], n, (), dash=dash % 3, **style))
        return out

    host_memory = [dict(line, label=line["label"] + " used")
                   for line in lines(Hardware.MEM_USED_GB)]
    host_memory += [dict(line, label=line["label"] + " process RSS", dash=1)
                    for line in lines(Hardware.RSS_GB)]
    panels = [
        {"id": "cpu", "title": "Host CPU (%)", "lines": lines(Hardware.CPU_PERCENT)},
        {"id": "host_memory", "title": "Host memory used and process RSS (GB)",
         "lines": host_memory},
        {"id": "device_util", "title": "Device utilization (%)",
         "lines": lines(Device.UTIL_PERCENT, "devices")},
        {"id": "device_memory", "title": "Device memory used (MB)",
         "lines": lines(Device.MEM_USED_MB, "devices")},
        {"id": "device_temp", "title": "Device temperature (°C)", "hlines": temp_lines,
         "lines": lines(Device.TEMP_C, "devices")},
    ]
    return [p for p in panels if any(line[X] for line in p["lines"])]
