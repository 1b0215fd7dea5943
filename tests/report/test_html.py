"""The HTML report and PNGs: content equals the log, text is escaped, size stays bounded."""
import html
import io
import json
import math
import os
import re
import time

import pytest
from event_rows import expected_events
from PIL import Image, ImageStat

from mindwatch import Monitor
from mindwatch.cli import main
from mindwatch.observation import DeviceSample, HardwareSample
from mindwatch.report.html import render_html
from mindwatch.report.png import write_pngs
from mindwatch.runlog import RankLog, RunLog, read_run

XSS = "<script>alert(1)</script>"


def make_run(directory, clock, *, ranks=1, steps=60, nan_step=40, explode_step=50):
    """A real run log written by Monitor: a NaN loss (warn) and a gradient explosion
    (checkpoint_and_stop, so it has a report file), hardware samples every 10 steps."""
    for rank in range(ranks):
        monitor = Monitor(str(directory), rank=rank, world_size=ranks, clock=clock,
                          stream=io.StringIO(), batch_size=16, hardware_interval_s=None,
                          on_anomaly={"loss_nonfinite": "warn",
                                      "gradient_explode": "checkpoint_and_stop"})
        for step in range(1, steps + 1):
            clock.advance(0.1 + 0.01 * (step % 3) + 0.02 * rank)
            loss = 3.0 / (1 + step / 20) + 0.01 * rank
            if step == nan_step and rank == 0:
                loss = float("nan")
            grad = 500.0 if step == explode_step else 1.0 + 0.1 * (step % 5)
            monitor.observe(step=step, epoch=1, loss=loss, lr=1e-3 * min(1.0, step / 10),
                            grad_norm=grad)
            if step % 10 == 0:
                monitor.observe_hardware(HardwareSample(
                    time=clock.time(), cpu_percent=40.0 + step % 7, mem_used_gb=8.0 + step / 100,
                    rss_gb=1.5, devices=[DeviceSample(type="npu", index=rank, util_percent=90.0,
                                                      mem_used_mb=20000.0 + step,
                                                      mem_total_mb=65536.0, temp_c=55.0)]))
            if monitor.stop_requested:
                break
        monitor.close()
    return read_run(str(directory))


def embedded_data(page):
    block = re.search(r'<script type="application/json" id="mw-data">(.*?)</script>', page, re.S)
    assert block, "no data block"

    def reject(name):
        raise AssertionError(f"bare {name} in the embedded JSON")
    return json.loads(block.group(1), parse_constant=reject), block.group(1)


def strict(value):
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    return value


def line(data, panel_id, label):
    panel = next(p for p in data["panels"] if p["id"] == panel_id)
    return next(item for item in panel["lines"] if item["label"] == label)


@pytest.fixture
def run(tmp_path, clock):
    return make_run(tmp_path / "run", clock)


def test_embedded_data_equals_the_log(run):
    data, _ = embedded_data(render_html(run))
    steps = run.ranks[0].steps
    assert len(steps) == 50                       # stopped by the explosion at step 50
    for panel_id, label, field in [("loss", "rank 0 loss", "loss"),
                                   ("loss", "rank 0 smoothed", "loss_smooth"),
                                   ("lr", "rank 0", "lr"), ("grad_norm", "rank 0", "grad_norm"),
                                   ("step_time", "rank 0", "step_time_s"),
                                   ("throughput", "rank 0", "samples_per_s")]:
        got = line(data, panel_id, label)
        assert got["x"] == [s["step"] for s in steps], panel_id
        assert got["y"] == [strict(s[field]) for s in steps], (panel_id, field)
    assert "NaN" in line(data, "loss", "rank 0 loss")["y"]
    grad = next(p for p in data["panels"] if p["id"] == "grad_norm")
    config = run.ranks[0].run["config"]
    assert {h["y"] for h in grad["hlines"]} == {config["grad_explode"], config["grad_vanish"]}
    hardware = run.ranks[0].of_kind("hardware")
    cpu = line(data, "cpu", "rank 0")
    assert cpu["y"] == [h["cpu_percent"] for h in hardware]
    assert cpu["x"] == [10, 20, 30, 40, 50]        # placed at the step logged before each
    temp = line(data, "device_temp", "rank 0 npu0")
    assert temp["y"] == [55.0] * 5
    assert [a["kind"] for a in data["anomalies"]] == [a["anomaly"] for a in run.anomalies]
    assert all(panel["x_range"] == [1, 50] for panel in data["panels"])   # one shared axis


def test_anomaly_table_lists_the_log(run, tmp_path):
    page = render_html(run)
    rows = re.findall(r'<tr data-step="(\d+)" data-rank="(\d+)" data-kind="([\w ]+)">', page)
    # one row per event (a step's anomalies on one rank), its kinds the acting one's first
    expected = [(str(step), str(rank), " ".join(kinds))
                for step, rank, kinds in expected_events(run.anomalies)]
    assert rows == expected and len(rows) >= 2
    kinds = {a["anomaly"] for a in run.anomalies}
    assert {"loss_nonfinite", "gradient_explode"} <= kinds
    # the explosion took actions beyond warn, so it has a report; the link is relative
    links = re.findall(r'<a href="([^"]+)">', page)
    assert links == ["anomalies/step50_rank0.md"]
    assert os.path.exists(os.path.join(run.directory, links[0]))
    explosion = [a for a in run.anomalies if a["step"] == 50]
    assert len(explosion) >= 2 and explosion[0]["anomaly"] == "gradient_explode"
    # its row: the kinds, the message of the anomaly that acted, its actions (no checkpoint:
    # the framework-free Monitor knows no weights)
    assert explosion[0]["checkpoint"] is None
    line = (f'{", ".join(a["anomaly"] for a in explosion)} at step 50: '
            f'{explosion[0]["message"]} [checkpoint+stop]')
    assert f'<td class="msg">{html.escape(line)}</td>' in page
    assert f"<h2>Anomalies ({len(run.anomalies)} anomalies in {len(rows)} events)</h2>" in page


def test_links_resolve_from_another_folder(run, tmp_path):
    page = render_html(run, link_base=str(tmp_path / "elsewhere"))
    assert '<a href="../run/anomalies/step50_rank0.md">' in page


def test_log_text_is_escaped(tmp_path, clock):
    run = make_run(tmp_path / "run", clock, steps=20)
    log = run.ranks[0]
    log.records.insert(-1, {"kind": "anomaly", "rank": 0, "time": 1.0, "anomaly": "loss_spike",
                            "step": 7, "value": 1.0, "threshold": 0.5, "message": XSS,
                            "actions": ["warn"], "checkpoint": None, "report": None})
    log.run["host"] = "<b>host</b>"
    log.run["config"]["print_interval"] = "</script><script>alert(2)</script>"
    page = render_html(run)
    assert XSS not in page and "<b>host</b>" not in page and "alert(2)</script>" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "&lt;b&gt;host&lt;/b&gt;" in page
    data, raw = embedded_data(page)
    assert "</" not in raw and "<" not in raw        # log text cannot end the script element
    assert any(a["message"] == XSS for a in data["anomalies"])   # and reads back unchanged
    # exactly our three script elements: data, onerror hook, plot.js
    assert page.count("<script") == 3


def test_multi_rank_has_spread_and_per_rank_curves(tmp_path, clock):
    run = make_run(tmp_path / "run", clock, ranks=3, nan_step=None, explode_step=None)
    data, _ = embedded_data(render_html(run))
    ids = [p["id"] for p in data["panels"]]
    assert ids == ["loss", "lr", "grad_norm", "step_time", "throughput", "spread_loss",
                   "spread_step_time", "cpu", "host_memory", "device_util", "device_memory",
                   "device_temp"]
    assert [item["label"] for item in next(p for p in data["panels"] if p["id"] == "lr")
            ["lines"]] == ["rank 0", "rank 1", "rank 2"]
    spread = {item["spread"]: item for item in data["panels"][5]["lines"]}
    losses = [[s["loss"] for s in log.steps] for log in run.ranks]
    assert spread["min"]["y"] == [min(col) for col in zip(*losses, strict=True)]
    assert spread["max"]["y"] == [max(col) for col in zip(*losses, strict=True)]
    assert spread["median"]["y"] == [sorted(col)[1] for col in zip(*losses, strict=True)]


def test_no_hardware_no_hardware_panels(tmp_path, clock):
    monitor = Monitor(str(tmp_path), clock=clock, stream=io.StringIO(), hardware_interval_s=None)
    for step in range(1, 6):
        clock.advance(0.1)
        monitor.observe(step=step, loss=1.0 / step)
    monitor.close()
    data, _ = embedded_data(render_html(read_run(str(tmp_path))))
    assert [p["id"] for p in data["panels"]] == ["loss", "lr", "grad_norm", "step_time",
                                                 "throughput"]


def _big_run(ranks, steps):
    """Records built as dicts in memory (no files): the report's cost is the point here."""
    logs = []
    for rank in range(ranks):
        records = [{"kind": "run", "rank": rank, "time": 0.0, "schema": 1, "world_size": ranks,
                    "host": "h", "pid": 1, "config": {"grad_explode": 100.0, "grad_vanish": 1e-6},
                    "versions": {"mindwatch": "0.1.0", "mindspore": None, "python": "3.11"}}]
        add = records.append
        smooth = 3.0
        for step in range(1, steps + 1):
            jitter = ((step * 2654435761 + rank) % 1000) / 1000.0   # cheap deterministic noise
            loss = 3.0 / (1 + step / 1000) + 0.1 * jitter
            smooth = 0.9 * smooth + 0.1 * loss
            add({"kind": "step", "rank": rank, "time": float(step), "step": step, "epoch": 1,
                 "loss": loss, "loss_smooth": smooth, "lr": 1e-3 * (1 - step / steps),
                 "grad_norm": 1.0 + jitter, "step_time_s": 0.1 + 0.01 * jitter,
                 "skipped": False, "samples_per_s": 320.0 / (1 + 0.1 * jitter)})
            if step % 10 == 0:
                add({"kind": "hardware", "rank": rank, "time": float(step), "cpu_percent": 50.0,
                     "mem_used_gb": 10.0 + jitter, "rss_gb": 2.0, "devices": [
                         {"type": "npu", "index": rank, "util_percent": 90.0 * jitter,
                          "mem_used_mb": 30000.0, "mem_total_mb": 65536.0, "temp_c": 60.0,
                          "power_w": None}]})
        add({"kind": "anomaly", "rank": rank, "time": 1.0, "anomaly": "loss_spike",
             "step": steps // 2, "value": 9.0, "threshold": 4.0, "message": "spike",
             "actions": ["warn"], "checkpoint": None, "report": None})
        add({"kind": "end", "rank": rank, "time": 2.0, "reason": "completed", "steps": steps,
             "elapsed_s": 1.0})
        logs.append(RankLog(rank=rank, path=f"rank_{rank}.jsonl", records=records))
    return RunLog(directory="big", ranks=logs)


def test_size_stays_bounded_for_long_runs():
    """8 ranks x 1,000,000 steps would need ~6 GB of record dicts in memory, so this measures
    8 x 25,000 and 8 x 100,000 steps and extrapolates linearly to 1,000,000 (every series is
    already capped at max_points in both, hardware included, so only the digits of the step
    numbers still grow). Measured directly once with this builder: 8 x 1,000,000 steps ->
    3.05 MB, rendered in 26-29 s on 2 cores (7 GB of record dicts in memory)."""
    sizes, seconds = {}, {}
    for steps in (25_000, 100_000):
        run = _big_run(8, steps)
        start = time.perf_counter()
        page = render_html(run)
        seconds[steps] = time.perf_counter() - start
        sizes[steps] = len(page.encode("utf-8"))
        del run, page
    per_step = (sizes[100_000] - sizes[25_000]) / 75_000
    at_1m = sizes[100_000] + per_step * 900_000
    assert sizes[100_000] < 10e6 and at_1m < 10e6, (sizes, at_1m)


def test_pngs_are_written_and_not_blank(run, tmp_path):
    paths = write_pngs(run, str(tmp_path / "png"), width=800, height=300)
    assert [os.path.basename(p) for p in paths] == ["loss.png", "lr.png", "grad_norm.png",
                                                     "step_time.png"]
    for path in paths:
        with Image.open(path) as image:
            assert image.size == (800, 300)
            rgb = image.convert("RGB")
            assert sum(ImageStat.Stat(rgb).var) > 100, path       # not a flat image
            assert len(rgb.getcolors(maxcolors=1 << 16)) > 20, path   # axes, text, curves


def test_cli_report_writes_html_and_pngs(run, tmp_path, capsys):
    png_dir = tmp_path / "png"
    assert main(["report", run.directory, "--png", str(png_dir), "--max-points", "100"]) == 0
    out = capsys.readouterr().out.splitlines()
    html_path = os.path.join(run.directory, "report.html")
    assert out[0] == html_path and os.path.getsize(html_path) > 1000
    assert sorted(os.listdir(png_dir)) == ["grad_norm.png", "loss.png", "lr.png",
                                           "step_time.png"]
    other = tmp_path / "out.html"
    assert main(["report", run.directory, "-o", str(other)]) == 0
    assert 'href="run/anomalies/step50_rank0.md"' in other.read_text(encoding="utf-8")


@pytest.mark.parametrize("argv, message", [
    (["report", "/nonexistent/run"], "no such run directory"),
    (["report", ".", "--max-points", "1"], "--max-points must be at least 10"),
])
def test_cli_report_errors_are_one_line(argv, message, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


def test_cli_report_unwritable_output(run, tmp_path, capsys):
    assert main(["report", run.directory, "-o", str(tmp_path / "no" / "such" / "r.html")]) == 2
    assert "cannot write" in capsys.readouterr().err
