"""The report's charts as plain data, shared by the HTML page and the PNGs: each rank's log
scanned once into columns, then one panel per chart (title, downsampled lines, threshold
lines, axes from ``axes.py``).

Each series is downsampled (``downsample.py``) to ``max_points``, which bounds the report's
size by the number of ranks and panels, not by the length of the run.
"""
from __future__ import annotations

import gc
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from ..basics import format as fmt
from ..records import Anomaly, Device, Hardware, Run, Step
from ..runlog import RankLog, RankScan, RunLog
from ..runlog.scan import X
from ..runlog.steps import StepIndex
from .axes import panel_axis
from .downsample import downsample
from .spread import STATS, per_step

# The anomaly table (and the markers) stop here: a run that logged an anomaly per step for a
# million steps would otherwise defeat the size bound; the rest stay in the log.
MAX_ANOMALY_ROWS = 2000


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


@dataclass
class Scanned:
    """A rank as the report draws it: its log (rank, skipped lines), its scan (columns), and
    the positions of its anomalies' steps, which downsampling always keeps."""
    log: RankLog
    scan: RankScan
    keep: list[int]

    @property
    def rank(self) -> int:
        return self.log.rank


def scan_logs(run: RunLog) -> list[Scanned]:
    found = []
    for log in run.ranks:
        scan = log.scan
        steps = scan.steps[Step.STEP]
        marked = {a.get(Anomaly.STEP) for a in scan.anomalies[:MAX_ANOMALY_ROWS]}
        found.append(Scanned(log, scan, positions_of(StepIndex(steps, scan.ascending), steps,
                                                     marked)))
    return found


def positions_of(index: StepIndex, steps, marked: set) -> list[int]:
    """The indices of the step records whose step is in ``marked``."""
    if not marked:
        return []
    if index.ascending:
        found = (index.index_of(step) for step in marked if isinstance(step, (int, float)))
        return sorted(i for i in found if i is not None)
    return [i for i, step in enumerate(steps) if step in marked]


def run_settings(scans: list[Scanned]) -> dict[str, Any]:
    """The first rank's ``run`` record (the latest segment): config, versions, thresholds."""
    return next((s.scan.run for s in scans if s.scan.run is not None), {})


def curve(label: str, rank: int, xs, ys, n: int, keep: list[int], **style: Any
          ) -> dict[str, Any]:
    """One downsampled curve, keeping the points at the indices ``keep``; ``text`` holds each
    value as the tooltip shows it."""
    x, y = downsample(xs, ys, n, keep_at=keep)
    return {"label": label, "rank": rank, "x": x, "y": y, "text": list(map(fmt.number, y)),
            **style}


def _spread(scans: list[Scanned], name: str, n: int) -> list[dict[str, Any]]:
    """Min / median / max across ranks at each step (finite values only)."""
    steps, stats = per_step([s.scan.steps[Step.STEP] for s in scans],
                            [s.scan.steps[name] for s in scans])
    return [curve(stat, -1, steps, stats[stat], n, [], spread=stat) for stat in STATS]


def build_panels(run: RunLog, max_points: int = 2000,
                 scans: list[Scanned] | None = None) -> list[dict[str, Any]]:
    """Every panel of the report as plain data: title, axis options, downsampled lines."""
    scans = scans if scans is not None else scan_logs(run)
    config = run_settings(scans).get(Run.CONFIG) or {}
    n = max_points

    def per_rank_lines(name: str, **style: Any) -> list[dict[str, Any]]:
        return [curve(f"rank {s.rank}", s.rank, s.scan.steps[Step.STEP], s.scan.steps[name],
                      n, s.keep, **style) for s in scans]

    def hlines(*pairs) -> list[dict[str, Any]]:
        return [{"y": config[key], "label": f"{key} {config[key]:g}"}
                for key in pairs if isinstance(config.get(key), (int, float))]

    loss_lines: list[dict[str, Any]] = []
    for s in scans:
        steps = s.scan.steps
        loss_lines.append(curve(f"rank {s.rank} loss", s.rank, steps[Step.STEP], steps[Step.LOSS],
                                n, s.keep, faint=True))
        loss_lines.append(curve(f"rank {s.rank} smoothed", s.rank, steps[Step.STEP],
                                steps[Step.LOSS_SMOOTH], n, s.keep))
    panels: list[dict[str, Any]] = [
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
    panels += _token_panels(scans, per_rank_lines)
    if len(scans) > 1:
        panels.append({"id": "spread_loss", "title": "Loss across ranks (min / median / max)",
                       "log": "auto", "lines": _spread(scans, Step.LOSS, n)})
        panels.append({"id": "spread_step_time", "log": "auto",
                       "title": "Step time across ranks (min / median / max, s)",
                       "lines": _spread(scans, Step.STEP_TIME_S, n)})
    if any(s.scan.hardware[X] for s in scans):
        panels += _hardware_panels(scans, n, hlines("max_temperature_c"))
    # One step axis for every panel, so a hardware curve lines up with the loss above it.
    xs = [x for panel in panels for line in panel["lines"] for x in line["x"]]
    for panel in panels:
        panel["markers"] = True            # anomalies are steps: every panel shows them
        panel["x_range"] = [min(xs), max(xs)] if xs else None
        panel["axis"] = panel_axis(panel)
    return panels


def _token_panels(scans: list[Scanned], per_rank_lines) -> list[dict[str, Any]]:
    """Tokens/s and MFU per device, for runs that logged them (``tokens_per_sample``); MFU
    is drawn in percent, as it is quoted."""
    panels = []
    if any(s.scan.medians.get(Step.TOKENS_PER_S) is not None for s in scans):
        panels.append({"id": "tokens", "title": "Throughput per device (tokens/s)",
                       "lines": per_rank_lines(Step.TOKENS_PER_S)})
    if any(s.scan.medians.get(Step.MFU) is not None for s in scans):
        lines = per_rank_lines(Step.MFU)
        for line in lines:
            line["y"] = [v * 100 for v in line["y"]]        # downsampled: no None left
            line["text"] = [fmt.number(v) + "%" for v in line["y"]]
        panels.append({"id": "mfu", "title": "Model FLOPs utilisation per device (%)",
                       "lines": lines})
    return panels


def _hardware_panels(scans: list[Scanned], n: int, temp_lines) -> list[dict[str, Any]]:
    def lines(name: str, source: str = "hardware", **style) -> list[dict[str, Any]]:
        out = []
        for s in scans:
            groups = [("", s.scan.hardware)] if source == "hardware" else \
                sorted(s.scan.devices.items())
            for dash, (device, series) in enumerate(groups):
                out.append(curve(f"rank {s.rank} {device}".rstrip(), s.rank, series[X],
                                 series[name], n, [], dash=dash % 3, **style))
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
