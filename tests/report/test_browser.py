"""The report in a real browser: headless Chromium loads it with no JS errors, renders every
panel, and the screenshot shows charts.

Needs Debian's ``chromium`` package (``apt-get install -y chromium``; .ci/run installs it).
Without it the test is skipped on a developer machine and FAILS in CI (``CI`` set), so a
missing browser can never pass unnoticed there.
"""
import io
import json
import math
import os
import re
import shutil
import subprocess

import pytest
from event_rows import expected_events
from PIL import Image

from mindwatch import Monitor
from mindwatch.observation import DeviceSample, HardwareSample
from mindwatch.report.compare import render_compare
from mindwatch.report.html import render_html
from mindwatch.report.runs import run_labels
from mindwatch.runlog import read_run

XSS = "<script>alert(1)</script>"
BROWSERS = ("chromium", "chromium-browser", "google-chrome")


@pytest.fixture(scope="module")
def browser():
    for name in BROWSERS:
        path = shutil.which(name)
        if path:
            return path
    reason = "no headless Chromium found (Debian: apt-get install -y chromium)"
    if os.environ.get("CI"):
        pytest.fail(f"{reason}; CI must install it")
    pytest.skip(reason)


def _chromium(browser, profile, *args, timeout=90):
    command = [browser, "--headless", "--disable-gpu", "--no-sandbox", "--no-first-run",
               "--disable-dev-shm-usage", f"--user-data-dir={profile}", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout)


def _clean_dom(browser, tmp_path, page):
    """The DOM of ``page`` after its scripts ran, asserting that the browser logged nothing
    to the console (the page logs nothing when healthy) and the page showed no error."""
    result = _chromium(browser, tmp_path / "profile", "--enable-logging=stderr", "--v=0",
                       "--window-size=1400,1000", "--dump-dom", page.as_uri())
    assert result.returncode == 0, result.stderr[-2000:]
    dom = result.stdout
    console = [line for line in result.stderr.splitlines() if ":CONSOLE" in line]
    assert console == [], console
    errors = re.search(r'<div id="errors" class="errors">(.*?)</div>', dom, re.S)
    assert errors and errors.group(1) == "", errors.group(1) if errors else dom[:2000]
    return dom


@pytest.fixture
def report(tmp_path, clock):
    """Two ranks, hardware samples, a NaN loss, an explosion and a hostile anomaly message."""
    directory = tmp_path / "run"
    for rank in range(2):
        monitor = Monitor(str(directory), rank=rank, world_size=2, clock=clock,
                          stream=io.StringIO(), batch_size=8, hardware_interval_s=None,
                          on_anomaly={"loss_nonfinite": "warn",
                                      "gradient_explode": "checkpoint_and_stop"})
        for step in range(1, 121):
            clock.advance(0.05 + 0.01 * rank + 0.002 * (step % 7))
            loss = 2.5 / (1 + step / 30) + 0.05 * ((step * 7 + rank) % 5) / 5
            if step == 70 and rank == 1:
                loss = float("nan")
            grad = 800.0 if step == 100 and rank == 0 else 1.0 + 0.05 * (step % 9)
            monitor.observe(step=step, epoch=1, loss=loss, lr=2e-3 * min(1.0, step / 20),
                            grad_norm=grad)
            if step % 10 == 0:
                monitor.observe_hardware(HardwareSample(
                    time=clock.time(), cpu_percent=30.0 + (step * 3 + rank * 11) % 40,
                    mem_used_gb=6.0 + step / 60, rss_gb=1.0 + step / 200,
                    devices=[DeviceSample(type="npu", index=rank, util_percent=70.0 + step % 25,
                                          mem_used_mb=9000.0 + 10 * step, mem_total_mb=32768.0,
                                          temp_c=50.0 + step / 10)]))
        monitor.close()
    with open(directory / "rank_1.jsonl", "a", encoding="utf-8") as handle:
        # appended after `end`: still listed; the view must show it as text, never run it
        handle.write(json.dumps({"kind": "anomaly", "rank": 1, "time": 1.0,
                                 "anomaly": "loss_spike", "step": 60, "value": 3.0,
                                 "threshold": 2.0, "message": XSS, "actions": ["warn"],
                                 "checkpoint": None, "report": None}) + "\n")
    run = read_run(str(directory))
    path = directory / "report.html"
    page = render_html(run)
    path.write_text(page, encoding="utf-8")
    data = json.loads(re.search(r'id="mw-data">(.*?)</script>', page, re.S).group(1))
    return run, path, data


# Appended after the page's own scripts: moves the mouse over the loss chart, so the dump
# also shows that the hover tooltip works.
HOVER = """<script>(function () {
  var svg = document.querySelector("#panel-loss svg"), r = svg.getBoundingClientRect();
  svg.dispatchEvent(new MouseEvent("mousemove", {clientX: r.left + r.width / 2,
                                                 clientY: r.top + r.height / 2}));
})();</script>"""


def test_page_loads_without_errors_and_renders_every_panel(browser, report, tmp_path):
    run, path, data = report
    probed = path.with_name("probed.html")
    probed.write_text(path.read_text(encoding="utf-8").replace("</body>", HOVER + "</body>"),
                      encoding="utf-8")
    dom = _clean_dom(browser, tmp_path, probed)
    rendered = re.search(r'<main id="report" data-rendered="(\d+)"', dom)
    assert rendered and int(rendered.group(1)) == len(data["panels"]) == 12
    for panel in data["panels"]:
        assert f'id="panel-{panel["id"]}"' in dom, panel["id"]
    assert dom.count("<polyline") >= 2 * len(data["panels"])
    assert 'class="anomaly-marker"' in dom and 'class="nonfinite"' in dom
    # the anomaly table holds exactly the log's events (a step's anomalies on one rank); the
    # hostile message stayed text
    rows = re.findall(r'<tr data-step="(\d+)" data-rank="(\d+)" data-kind="([\w ]+)">', dom)
    assert rows == [(str(step), str(rank), " ".join(kinds)) for log in run.ranks
                    for step, rank, kinds in expected_events(log.anomalies)]
    assert ("60", "1", "loss_spike") in rows
    assert [kinds.split()[0] for step, rank, kinds in rows if (step, rank) == ("100", "0")] == [
        "gradient_explode"]
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in dom and XSS not in dom
    tip = re.search(r'<div class="tip" style="display: block;[^"]*">(.*?)</div>', dom, re.S)
    assert tip and "rank 0 loss: " in tip.group(1) and "rank 1 smoothed: " in tip.group(1)


def test_screenshot_shows_the_charts(browser, report, tmp_path):
    _, path, _ = report
    shot = tmp_path / "report.png"
    result = _chromium(browser, tmp_path / "profile", f"--screenshot={shot}",
                       "--window-size=1400,3000", "--hide-scrollbars", path.as_uri())
    assert result.returncode == 0 and shot.exists(), result.stderr[-2000:]
    with Image.open(shot) as image:
        assert image.size == (1400, 3000)
        rgb = image.convert("RGB")
        colours = rgb.getcolors(maxcolors=1 << 20)
        assert len(colours) > 200, len(colours)       # curves, text, anti-aliasing
        # the palette is there: rank 0 blue and rank 1 orange curves, the red limit lines
        present = {c for _, c in colours}
        for expected in [(0x1f, 0x77, 0xb4), (0xff, 0x7f, 0x0e), (0xc0, 0x39, 0x2b)]:
            assert expected in present, expected
        # and not one flat colour: the most common colour (background) is under 90%
        assert max(count for count, _ in colours) < 0.9 * 1400 * 3000


def _tags(html, name):
    """The attributes of every ``<name ...>`` tag, as dicts."""
    return [dict(re.findall(r'([\w-]+)="([^"]*)"', attrs))
            for attrs in re.findall(rf"<{name}\b([^>]*)>", html)]


def _panel(dom, panel_id):
    start = dom.index(f'id="panel-{panel_id}"')
    return dom[start:dom.index("</section>", start)]


def test_runs_compared_in_one_page(browser, two_runs, tmp_path):
    """Two real runs drawn over each other: the legends name both, the table of runs holds
    what they logged, the explosion of lr-low's rank 1 is a dot on that curve, no JS error."""
    dirs, runs = two_runs
    path = tmp_path / "compare.html"
    path.write_text(render_compare(runs, run_labels(dirs)), encoding="utf-8")
    dom = _clean_dom(browser, tmp_path, path)
    rendered = re.search(r'<main id="report" data-rendered="(\d+)"', dom)
    assert rendered and int(rendered.group(1)) == 7        # 5 panels + 2 spreads of lr-low
    legend = re.search(r'<div class="legend">(.*?)</div>', _panel(dom, "lr"), re.S).group(1)
    assert re.findall(r"</i>([^<]+)</span>", legend) == ["lr-high", "lr-low rank 0",
                                                         "lr-low rank 1"]
    # the table of runs: steps and final loss (last finite loss of rank 0) as logged
    for label, run in zip(["lr-high", "lr-low"], runs, strict=True):
        row = re.search(rf'<tr data-run="{label}">(.*?)</tr>', dom, re.S).group(1)
        cells = re.findall(r"<td[^>]*>(.*?)</td>", row, re.S)
        losses = [s["loss"] for s in run.ranks[0].steps if math.isfinite(s["loss"])]
        assert cells[2] == str(run.ranks[0].steps[-1]["step"])
        assert float(re.search(r'data-value="([^"]+)"', row).group(1)) == losses[-1]
    # the explosion: a dot on lr-low rank 1's gradient-norm curve, at one of its vertices
    grad = _panel(dom, "grad_norm")
    dots = [d for d in _tags(grad, "circle") if d.get("class") == "anomaly-dot"]
    # (and lr-high's NaN loss at step 60 is a dot on lr-high's curve: its norm is finite)
    assert sorted((d["data-run"], d["data-line"], d["data-step"]) for d in dots) == [
        ("lr-high", "lr-high", "60"), ("lr-low", "lr-low rank 1", "40")]
    for dot in dots:
        curve = [p for p in _tags(grad, "polyline") if p.get("data-label") == dot["data-line"]]
        vertices = {point for p in curve for point in p["points"].split()}
        assert f'{dot["cx"]},{dot["cy"]}' in vertices, dot
    markers = _tags(grad, "g")
    assert {m.get("data-run") for m in markers if m.get("class") == "anomaly-marker"} == {
        "lr-high", "lr-low"}                  # lr-high's NaN loss at step 60 is marked too


@pytest.fixture
def state_report(tmp_path, clock):
    """A run whose 40 layers' update ratios jump once (an update_ratio anomaly on
    blocks.7.mlp), with a NaN gradient in one state record and watched attention logits."""
    directory = tmp_path / "state-run"
    monitor = Monitor(str(directory), clock=clock, stream=io.StringIO(),
                      hardware_interval_s=None)
    layers = [f"blocks.{n}.{part}" for n in range(20) for part in ("attn", "mlp")]
    for step in range(1, 2001):
        clock.advance(0.01)
        monitor.observe(step=step, epoch=1, loss=2.0, lr=1e-3, grad_norm=1.0)
        if step % 2:
            continue
        ratio = {name: 1e-3 * (1 + i % 5) for i, name in enumerate(layers)}
        if step == 1200:
            ratio["blocks.7.mlp"] = 0.5
        grads = {name: math.nan if step == 800 and name == "blocks.3.attn" else 0.1
                 for name in layers}
        monitor.observe_state(
            step=step, weight_norm=10.0, update_norm=1e-2,
            layers={name: {"weight_norm": 1.0, "update_norm": ratio[name],
                           "update_ratio": ratio[name], "grad_norm": grads[name]}
                    for name in layers},
            activations={f"blocks.{n}.attn.scores": {"max_logit": 120.0 if step >= 1900
                                                     and n == 4 else 10.0 + n}
                         for n in range(20)})
    monitor.close()
    run = read_run(str(directory))
    path = directory / "report.html"
    path.write_text(render_html(run), encoding="utf-8")
    return run, path


def test_state_heatmaps_render_with_the_anomalies_marked(browser, state_report, tmp_path):
    run, path = state_report
    assert sorted(a["anomaly"] for a in run.anomalies) == ["attention_logit", "update_ratio"]
    dom = _clean_dom(browser, tmp_path, path)
    assert re.search(r'data-heatmaps="(\d+)"', dom).group(1) == "5"
    canvases = {section: dict(re.findall(r'(data-[\w-]+)="([^"]*)"', attrs))
                for section, attrs in re.findall(
                    r'<section class="panel heatmap" id="heat-(\w+)".*?<canvas([^>]*)>', dom,
                    re.S)}
    assert sorted(canvases) == ["grad_norm", "max_logit", "update_norm", "update_ratio",
                                "weight_norm"]
    for name, attrs in canvases.items():       # 1000 state records into 600 columns
        rows = "20" if name == "max_logit" else "40"
        assert (attrs["data-rows"], attrs["data-columns"]) == (rows, "600"), name
    assert canvases["update_ratio"]["data-marks"] == "1"
    assert canvases["max_logit"]["data-marks"] == "1"
    assert canvases["grad_norm"]["data-marks"] == "0"
    shot = tmp_path / "heat.png"
    result = _chromium(browser, tmp_path / "profile", f"--screenshot={shot}",
                       "--window-size=1400,6000", "--hide-scrollbars", path.as_uri())
    assert result.returncode == 0 and shot.exists(), result.stderr[-2000:]
    with Image.open(shot) as image:
        present = {c for _, c in image.convert("RGB").getcolors(maxcolors=1 << 22)}
    # viridis' ends, the NaN cell's red and the anomaly marks' magenta are on the page
    for expected in [(68, 1, 84), (253, 231, 37), (0xd6, 0x27, 0x28), (0xff, 0x00, 0xff)]:
        assert expected in present, expected


# Hovers the job page's step-time band at its middle and the step-time heatmap's cell of
# rank 11 in its first column, so the dump shows both tooltips.
JOB_HOVER = """<script>(function () {
  var svg = document.querySelector("#panel-step_time_s svg"), r = svg.getBoundingClientRect();
  svg.dispatchEvent(new MouseEvent("mousemove", {clientX: r.left + r.width / 2,
                                                 clientY: r.top + r.height / 2}));
  var c = document.querySelector("#heat-ranks-step_time_s canvas");
  var b = c.getBoundingClientRect(), s = b.width / 1200, cell = (1200 - 190 - 16) / 6;
  c.dispatchEvent(new MouseEvent("mousemove", {clientX: b.left + (190 + cell / 2) * s,
                                               clientY: b.top + (12 + 11.5 * 16) * s}));
})();</script>"""


def test_job_page_draws_bands_and_rank_heatmaps(browser, tmp_path):
    """16 ranks (test_job_report.py's job): a band per spread chart, the heatmaps' canvases
    with a row per rank and the NaN rank's event outlined, both tooltips, no JS error."""
    from test_job_report import sixteen_rank_job

    from mindwatch.report.job.page import job_report

    directory = sixteen_rank_job(tmp_path / "job")
    page = job_report(str(directory))
    data = json.loads(re.search(r'id="mw-data">(.*?)</script>', page, re.S).group(1))
    path = tmp_path / "job.html"
    path.write_text(page.replace("</body>", JOB_HOVER + "</body>"), encoding="utf-8")
    dom = _clean_dom(browser, tmp_path, path)
    rendered = re.search(r'<main id="report" data-rendered="(\d+)"', dom)
    assert rendered and int(rendered.group(1)) == len(data["panels"]) == 7
    bands = [p["id"] for p in data["panels"] if p.get("band")]
    assert bands == ["step_time_s", "data_time_s", "local_grad_norm", "memory_mb"]
    for panel_id in bands:
        assert [t.get("class") for t in _tags(_panel(dom, panel_id), "polygon")] == ["band"]
    assert re.search(r'data-heatmaps="(\d+)"', dom).group(1) == "2"
    canvases = {section: dict(re.findall(r'(data-[\w-]+)="([^"]*)"', attrs))
                for section, attrs in re.findall(
                    r'<section class="panel heatmap" id="heat-ranks-(\w+)".*?<canvas([^>]*)>',
                    dom, re.S)}
    assert {name: (a["data-rows"], a["data-columns"], a["data-marks"])
            for name, a in canvases.items()} == {"step_time_s": ("16", "6", "1"),
                                                 "local_grad_norm": ("16", "6", "1")}
    tips = re.findall(r'<div class="tip" style="display: block;[^"]*">(.*?)</div>', dom, re.S)
    assert len(tips) == 2, tips
    assert "max across ranks: 0.15 on rank 11" in tips[0] and "median: 0.1075" in tips[0]
    assert tips[1].startswith("rank 11\nsteps 1-10\n~0.150 (mean over the bin"), tips[1]
