"""``mindwatch report --png DIR``: the main panels as PNG line charts, drawn with Pillow
from the same panel data as the HTML page (``panels.build_panels``), axes and ticks included."""
from __future__ import annotations

import math
import os
from collections.abc import Mapping
from typing import Any

from ..records import Anomaly
from ..runlog import RunLog
from .panels import MAX_ANOMALY_ROWS, Scanned, build_panels, gc_paused, scan_logs

PNG_PANELS = ("loss", "lr", "grad_norm", "step_time")


def _draw_png(panel: Mapping[str, Any], marks: list[int], width: int, height: int):
    from PIL import Image, ImageDraw, ImageFont
    img = Image.new("RGB", (width, height), "white")
    draw = ImageDraw.Draw(img)
    font = ImageFont.load_default(size=13)
    left, right, top, bottom = 70, width - 16, 28, height - 30
    draw.text((left, 6), panel["title"], fill="#1d2329", font=font)
    lines, axis = panel["lines"], panel["axis"]
    if axis is None:
        draw.text((left, height // 2), "no data", fill="#8a949c", font=font)
        return img
    log, (x0, x1), (y0, y1) = axis["log"], axis["x"], axis["y"]

    def px(x):
        return left + (x - x0) / (x1 - x0) * (right - left)

    def py(v):
        return bottom - ((math.log10(v) if log else v) - y0) / (y1 - y0) * (bottom - top)

    grey = "#5b6670"
    for value, label in axis["y_ticks"]:
        draw.line([(left, py(value)), (right, py(value))], fill="#eceff2")
        draw.text((left - 6, py(value)), label, fill=grey, font=font, anchor="rm")
    for value, label in axis["x_ticks"]:
        draw.line([(px(value), bottom), (px(value), bottom + 4)], fill=grey)
        draw.text((px(value), bottom + 6), label, fill=grey, font=font, anchor="mt")
    draw.text((right, height - 4), "step", fill=grey, font=font, anchor="rd")
    draw.rectangle([left, top, right, bottom], outline="#9aa4ad")
    for step in marks:
        if x0 <= step <= x1:
            draw.line([(px(step), top), (px(step), bottom)], fill="#e8a0a0")
    for h in panel.get("hlines") or ():
        if not log or h["y"] > 0:
            draw.line([(left, py(h["y"])), (right, py(h["y"]))], fill="#c0392b")
            draw.text((right - 4, py(h["y"]) - 2), h["label"], fill="#c0392b", font=font,
                      anchor="rb")
    # Legend right-aligned beside the title, when it fits there.
    shown = [ln for ln in lines if not ln.get("faint")]
    needed = sum(draw.textlength(ln["label"], font=font) + 30 for ln in shown)
    legend_x = right - needed
    if legend_x > left + draw.textlength(panel["title"], font=font) + 20:
        for ln in shown:
            draw.line([(legend_x, 13), (legend_x + 18, 13)], fill=_colour(ln), width=3)
            draw.text((legend_x + 22, 6), ln["label"], fill="#1d2329", font=font)
            legend_x += draw.textlength(ln["label"], font=font) + 30
    for ln in lines:
        colour = _colour(ln)
        if ln.get("faint"):     # a third of the colour on white
            colour = "#" + "".join(f"{(int(colour[i:i + 2], 16) + 2 * 255) // 3:02x}"
                                   for i in (1, 3, 5))
        segment: list[tuple] = []
        for x, v in [*zip(ln["x"], ln["y"], strict=True), (None, math.nan)]:
            if math.isfinite(v) and (v > 0 or not log):
                segment.append((px(x), py(v)))
                continue
            if len(segment) > 1:      # a gap (NaN, inf, <= 0 on a log axis) breaks the line
                draw.line(segment, fill=colour, width=1 if ln.get("faint") else 2)
            segment = []
            if x is not None and not math.isfinite(v):   # NaN / inf: a red mark on the top edge
                draw.polygon([(px(x) - 4, top), (px(x) + 4, top), (px(x), top + 7)],
                             fill="#c0392b")
    return img


_PALETTE = ["#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#17becf",
            "#bcbd22"]
_SPREAD = {"min": 2, "median": 0, "max": 1}


def _colour(line: Mapping[str, Any]) -> str:
    if line.get("colour"):          # set per run on a page of several runs (overlay.py)
        return line["colour"]
    index = line["rank"] if line["rank"] >= 0 else _SPREAD[line["spread"]]
    return _PALETTE[index % len(_PALETTE)]


def marked_steps(scans: list[Scanned]) -> list[int]:
    """The steps of the anomalies the charts mark."""
    return sorted({step for scanned in scans for a in scanned.scan.anomalies[:MAX_ANOMALY_ROWS]
                   if isinstance(step := a.get(Anomaly.STEP), int)})


def write_pngs(run: RunLog, out_dir: str, *, width: int = 1000, height: int = 360) -> list[str]:
    """The main panels (loss, LR, gradient norm, step time) as PNG files; returns the paths."""
    with gc_paused():
        scans = scan_logs(run)
        panels = {p["id"]: p for p in build_panels(run, width, scans)}
    return draw_pngs(panels, marked_steps(scans), out_dir, width=width, height=height)


def draw_pngs(panels: Mapping[str, Mapping[str, Any]], marks: list[int], out_dir: str, *,
              width: int, height: int) -> list[str]:
    """``PNG_PANELS`` of ``panels`` (by id) as ``out_dir/<id>.png``; returns the paths."""
    os.makedirs(out_dir, exist_ok=True)
    paths = []
    for panel_id in PNG_PANELS:
        path = os.path.join(out_dir, f"{panel_id}.png")
        _draw_png(panels[panel_id], marks, width, height).save(path)
        paths.append(path)
    return paths
