"""``mindwatch report --png DIR``: the main panels as PNG line charts, drawn with Pillow
from the same panel data as the HTML page (``html.build_panels``)."""
from __future__ import annotations

import math
import os
from typing import Any, List, Mapping

from .. import format as fmt
from ..runlog import RunLog
from .html import MAX_ANOMALY_ROWS, _gc_paused, _scan, build_panels

PNG_PANELS = ("loss", "lr", "grad_norm", "step_time")


def _ticks(low: float, high: float, log: bool) -> List[float]:
    """Round ticks (the same rules as plot.js): on a log axis ``low``/``high`` and the ticks
    are log10 values, decades when the axis spans one or more."""
    if log and high - low >= 1:
        stride = max(1, math.ceil((math.ceil(high) - math.floor(low)) / 8))
        return [e for e in range(math.floor(low), math.ceil(high) + 1, stride) if low <= e <= high]
    if log:
        return [math.log10(v) for v in _ticks(10 ** low, 10 ** high, False) if v > 0]
    raw = (high - low) / 5 or 1.0
    base = 10 ** math.floor(math.log10(raw))
    step = next(m * base for m in (1, 2, 5, 10) if m * base >= raw)
    return [i * step for i in range(math.ceil(low / step), math.floor(high / step) + 1)]


def _draw_png(panel: Mapping[str, Any], marks: List[int], width: int, height: int):
    from PIL import Image, ImageDraw, ImageFont
    img = Image.new("RGB", (width, height), "white")
    draw = ImageDraw.Draw(img)
    font = ImageFont.load_default(size=13)
    left, right, top, bottom = 70, width - 16, 28, height - 30
    draw.text((left, 6), panel["title"], fill="#1d2329", font=font)
    lines = panel["lines"]
    finite = [v for ln in lines for v in ln["y"] if math.isfinite(v)]
    log = panel.get("log") is True or (panel.get("log") == "auto" and finite and
                                       min(finite) > 0 and max(finite) / min(finite) > 30)
    finite += [h["y"] for h in panel.get("hlines") or ()]
    xs = panel.get("x_range") or [x for ln in lines for x in ln["x"]]
    if log:
        finite = [math.log10(v) for v in finite if v > 0]
    if not finite or not xs:
        draw.text((left, height // 2), "no data", fill="#8a949c", font=font)
        return img
    y0, y1 = min(finite), max(finite)
    y0, y1 = (y0 - 0.5, y1 + 0.5) if y0 == y1 else (y0 - (y1 - y0) * .05, y1 + (y1 - y0) * .05)
    x0, x1 = min(xs), max(xs)
    x1 = x1 if x1 > x0 else x0 + 1

    def px(x):
        return left + (x - x0) / (x1 - x0) * (right - left)

    def py(v):
        return bottom - ((math.log10(v) if log else v) - y0) / (y1 - y0) * (bottom - top)

    grey = "#5b6670"
    for t in _ticks(y0, y1, log):
        value = 10 ** t if log else t
        draw.line([(left, py(value)), (right, py(value))], fill="#eceff2")
        label = f"{value:g}" if log and t == int(t) else fmt.number(value, 3)
        draw.text((left - 6, py(value)), label, fill=grey, font=font, anchor="rm")
    for t in _ticks(x0, x1, False):
        draw.line([(px(t), bottom), (px(t), bottom + 4)], fill=grey)
        label = str(int(t)) if t == int(t) else f"{t:g}"
        draw.text((px(t), bottom + 6), label, fill=grey, font=font, anchor="mt")
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
        segment: List[tuple] = []
        for x, v in list(zip(ln["x"], ln["y"])) + [(None, math.nan)]:
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
    index = line["rank"] if line["rank"] >= 0 else _SPREAD[line.get("spread")]
    return _PALETTE[index % len(_PALETTE)]


def write_pngs(run: RunLog, out_dir: str, *, width: int = 1000, height: int = 360) -> List[str]:
    """The main panels (loss, LR, gradient norm, step time) as PNG files; returns the paths."""
    os.makedirs(out_dir, exist_ok=True)
    with _gc_paused():
        scans = [_scan(log) for log in run.ranks]
        panels = {p["id"]: p for p in build_panels(run, width, scans)}
    marks = sorted({a.get("step") for scan in scans for a in scan["anomalies"][:MAX_ANOMALY_ROWS]
                    if isinstance(a.get("step"), int)})
    paths = []
    for panel_id in PNG_PANELS:
        path = os.path.join(out_dir, f"{panel_id}.png")
        _draw_png(panels[panel_id], marks, width, height).save(path)
        paths.append(path)
    return paths
