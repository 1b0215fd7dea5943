"""The report of a job of many ranks (issue #43): spreads across ranks as bands with the named
ranks' curves, not a curve per rank; the ranks-by-steps heatmaps; one events row per job
event. A 16-rank job of real Monitors (tests/thread_ranks.py), and a 1024-rank job.jsonl
written here."""
import base64
import json
import math
import os
import re

import numpy as np
import pytest

from mindwatch.report.heatmaps import NAN, TOP
from mindwatch.report.html import render_html
from mindwatch.report.job.charts import MAX_NAMED, build_job_panels
from mindwatch.report.job.heatmap import MAX_ROWS
from mindwatch.report.job.page import job_report, write_job_report
from mindwatch.runlog import read_run
from mindwatch.runlog.job.view import JOB_LOG, JobView, SpreadColumns
from thread_ranks import run_ranks

RANKS, STEPS, BAD_RANK, BAD_STEP, SLOW_RANK = 16, 60, 5, 40, 11
BANDS = ("step_time_s", "data_time_s", "local_grad_norm", "memory_mb")


def sixteen_rank_job(directory):
    """16 ranks on two hosts of 8 for 60 steps at a constant LR of 0.01: rank 11 slowest at
    every step (0.15 s, the others 0.1 + 0.001 x rank), rank 5's loss and local gradient
    norm NaN at step 40 (warned; training goes on)."""
    hosts = {rank: f"node-{rank // 8}" for rank in range(RANKS)}

    def body(monitor, rank):
        for step in range(1, STEPS + 1):
            bad = (rank, step) == (BAD_RANK, BAD_STEP)
            monitor.end_step(step=step, lr=0.01, grad_norm=4.0,
                             loss=math.nan if bad else 2.0 - 0.01 * step + 0.001 * rank,
                             extra={"local_grad_norm": math.nan if bad else 1.0 + 0.1 * rank},
                             step_time_s=0.15 if rank == SLOW_RANK else 0.1 + 0.001 * rank,
                             data_time_s=0.001)
        monitor.close()
    run_ranks(RANKS, body, log_dir=str(directory), hosts=hosts, on_anomaly="warn")
    return directory


def page_data(page):
    return json.loads(re.search(r'id="mw-data">(.*?)</script>', page, re.S).group(1))


def cells(heatmap):
    """The heatmap's cell codes as a (rows, columns) array."""
    raw = np.frombuffer(base64.b64decode(heatmap["cells"]), np.uint8)
    return raw.reshape(len(heatmap["rows"]), heatmap["columns"])


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    directory = sixteen_rank_job(tmp_path_factory.mktemp("job") / "run")
    page = job_report(str(directory))
    return directory, page, page_data(page)


def panel(data, panel_id):
    return next(p for p in data["panels"] if p["id"] == panel_id)


def test_sixteen_ranks_draw_a_band_and_the_named_ranks_not_sixteen_curves(job):
    _, page, data = job
    assert 'data-job="1"' in page
    named = {line["rank"] for line in panel(data, "step_time_s")["lines"] if line["rank"] >= 0}
    assert {BAD_RANK, SLOW_RANK} <= named and len(named) <= MAX_NAMED < RANKS
    for name in BANDS:
        lines = panel(data, name)["lines"]
        assert [line.get("spread") for line in lines[:3]] == ["max", "median", "min"]
        assert [line.get("band") for line in lines[:3]] == ["hi", None, "lo"]
        assert len(lines) == 3 + len(named), name        # 3 series + the named, never 16
        assert {line["rank"] for line in lines[3:]} == named
    high, median, low = panel(data, "step_time_s")["lines"][:3]
    assert len(high["x"]) == STEPS and set(high["y"]) == {0.15} and set(low["y"]) == {0.1}
    assert median["y"][0] == pytest.approx(0.1075)               # between ranks 7 and 8
    # the max edge's tooltip names the slowest rank; the min edge's, rank 0
    assert high["text"][0] == "0.15 on rank 11" and low["text"][0] == "0.1 on rank 0"
    labels = {line["label"] for line in panel(data, "step_time_s")["lines"]}
    assert "rank 11 (node-1, device 11)" in labels and "rank 5 (node-0, device 5)" in labels
    # named ranks' step times from their own logs, a point per step
    eleven = next(line for line in panel(data, "step_time_s")["lines"] if line["rank"] == 11)
    assert len(eleven["x"]) == STEPS and set(eleven["y"]) == {0.15}


def test_the_constant_lr_is_drawn_around_its_value(job):
    axis = panel(job[2], "lr")["axis"]
    low, high = axis["y"]
    assert 0 < low < 0.01 < high
    labels = [label for _, label in axis["y_ticks"]]
    assert "0.01" in labels and "0" not in labels


def test_heatmap_rows_are_ranks_and_the_nan_cell_is_marked(job):
    _, _, data = job
    maps = {h["id"]: h for h in data["heatmaps"]}
    norms, times = maps["heat-ranks-local_grad_norm"], maps["heat-ranks-step_time_s"]
    for heatmap in (norms, times):
        assert heatmap["rows"] == [f"rank {r}" for r in range(RANKS)]
        assert heatmap["columns"] == 6                           # bins of 10 steps
        assert heatmap["steps"][3] == [31, 40]
    grid = cells(norms)
    column = 3                                                   # steps 31-40
    assert grid[BAD_RANK, column] == NAN
    assert (np.delete(grid, BAD_RANK, axis=0) != NAN).all() and (grid[BAD_RANK, 4:] != NAN).all()
    assert {(m["row"], m["col"], m["step"]) for m in norms["marks"]} == {
        (BAD_RANK, column, BAD_STEP)}
    # the slowest rank's row is the top of the scale in every bin
    assert (cells(times)[SLOW_RANK] == TOP).all()


def test_one_events_row_per_job_event(job):
    _, page, data = job
    rows = re.findall(r'<tr data-step="(\d+)" data-ranks="([^"]*)" data-kind="([^"]*)">(.*?)'
                      r"</tr>", page, re.S)
    assert [(step, ranks, kinds) for step, ranks, kinds, _ in rows] == [
        ("40", "5", "loss_nonfinite")]
    cells_text = re.findall(r"<td[^>]*>(.*?)</td>", rows[0][3], re.S)
    assert cells_text[2] == "5 (1 rank)" and cells_text[3] == "rank 5 (node-0, device 5)"
    assert data["anomalies"] == [{"step": 40, "rank": 5, "kind": "loss_nonfinite",
                                  "message": "loss_nonfinite on rank(s) 5"}]


def test_render_html_of_the_run_draws_the_same_job_page(job):
    directory, _, data = job
    again = page_data(render_html(read_run(str(directory))))
    assert [p["id"] for p in again["panels"]] == [p["id"] for p in data["panels"]]
    assert [len(p["lines"]) for p in again["panels"]] == [len(p["lines"]) for p in data["panels"]]


def test_without_a_job_log_the_rank_logs_are_condensed(job, tmp_path):
    """A copy of the rank logs only (an older run): the same band of step times and the
    same event row, condensed from the 16 logs."""
    directory, _, data = job
    copy = tmp_path / "copy"
    copy.mkdir()
    for name in os.listdir(directory):
        if name.startswith("rank_"):
            (copy / name).write_bytes((directory / name).read_bytes())
    page = render_html(read_run(str(copy)))
    condensed = page_data(page)
    assert 'data-job="1"' in page
    high, _, low = panel(condensed, "step_time_s")["lines"][:3]
    assert high["y"] == panel(data, "step_time_s")["lines"][0]["y"]
    assert high["text"][0] == "0.15 on rank 11" and low["text"][0] == "0.1 on rank 0"
    times = next(h for h in condensed["heatmaps"] if h["id"] == "heat-ranks-step_time_s")
    assert times["rows"] == [f"rank {r}" for r in range(RANKS)]
    assert (cells(times)[SLOW_RANK] == TOP).all()
    assert re.findall(r'<tr data-step="(\d+)" data-ranks="([^"]*)"', page) == [("40", "5")]


def test_a_resumed_job_draws_each_step_once():
    """Steps logged again after a resume: the last record of each counts, in step order."""
    steps = np.array([1, 2, 3, 2, 3, 4])
    spread = SpreadColumns(min=np.array([1.0, 1, 1, 2, 2, 2]), median=np.full(6, 3.0),
                           max=np.array([5.0, 5, 5, 9, 9, 9]), min_rank=np.zeros(6, int),
                           max_rank=np.array([1, 1, 1, 3, 3, 3]))
    view = JobView(directory="x", source=JOB_LOG, world_size=8, places={}, runs=[],
                   steps=steps, loss=np.full(6, np.nan), grad_norm=np.full(6, np.nan),
                   skipped=np.zeros(6, bool), spreads={"step_time_s": spread}, events=[],
                   hangs=[], bins=[], ends=[])
    panels = build_job_panels(view, {}, [], max_points=100)
    (only,) = panels
    high = only["lines"][0]
    assert high["x"] == [1, 2, 3, 4] and high["y"] == [5.0, 9.0, 9.0, 9.0]
    assert high["text"][1] == "9 on rank 3"


# -- a job of 1024 ranks, written as rank 0 writes job.jsonl ---------------------------------
def write_job_log(directory, ranks, steps, nan_rank, nan_step):
    """job.jsonl: run (hosts of 8), a job_step per step, job_ranks bins of 10 then 100 steps,
    one event at ``nan_step`` on ``nan_rank`` (its local norm NaN in its bin), end."""
    rng = np.random.default_rng(0)
    hosts = [{"host": f"node-{h}", "ranks": f"{h * 8}-{h * 8 + 7}", "devices": list(range(8))}
             for h in range(ranks // 8)]
    lines = [{"kind": "run", "rank": 0, "time": 0.0, "schema": 1, "world_size": ranks,
              "hosts": hosts, "config": {"grad_explode": 100.0}}]
    start = 1
    for step in range(1, steps + 1):
        time_s = 0.1 + 0.01 * rng.random()
        spread = {"min": 0.1, "min_rank": 3, "median": time_s, "max": 0.2, "max_rank": 900}
        lines.append({"kind": "job_step", "rank": 0, "time": float(step), "step": step,
                      "loss": 2.0, "grad_norm": 1.0, "step_time_s": spread,
                      "data_time_s": spread, "local_grad_norm": spread, "memory_mb": spread,
                      "skipped": False, "ranks": None})
        if step == nan_step:
            lines.append({"kind": "event", "rank": 0, "time": float(step), "step": step,
                          "kinds": ["gradient_nonfinite"], "ranks": str(nan_rank),
                          "rank_count": 1, "origin_rank": nan_rank, "origin_host": "n",
                          "origin_device": 1, "actions": ["skip"], "message": "nan",
                          "report": None, "checkpoint": None})
        if step % (10 if step <= 100 else 100) == 0:
            norms = (1 + rng.random(ranks)).round(4).tolist()
            if start <= nan_step <= step:
                norms[nan_rank] = "NaN"
            values = (0.1 + 0.01 * rng.random(ranks)).round(4).tolist()
            lines.append({"kind": "job_ranks", "rank": 0, "time": float(step),
                          "step_from": start, "step": step, "step_time_s": values,
                          "data_time_s": values, "local_grad_norm": norms,
                          "memory_mb": values})
            start = step + 1
    lines.append({"kind": "end", "rank": 0, "time": float(steps), "reason": "completed",
                  "steps": steps, "stopped_by": None, "goodput": None})
    directory.mkdir(parents=True)
    with open(directory / "job.jsonl", "w", encoding="utf-8") as handle:
        handle.writelines(json.dumps(line) + "\n" for line in lines)
    return directory


def test_a_job_of_1024_ranks_renders_with_a_bounded_page(tmp_path):
    directory = write_job_log(tmp_path / "big", ranks=1024, steps=3000, nan_rank=777,
                              nan_step=1550)
    output = str(directory / "report.html")
    assert write_job_report(str(directory), output) == output      # no rank log needed
    with open(output, encoding="utf-8") as handle:
        page = handle.read()
    assert len(page.encode()) < 1_000_000, len(page)
    data = page_data(page)
    # as at 16 ranks, 3 series per band and the named ranks': the origin of the event and
    # the rank most often slowest and largest, from the job's bins (no rank log here)
    for name in BANDS:
        lines = panel(data, name)["lines"]
        assert [line.get("spread") for line in lines] == ["max", "median", "min", None, None]
        assert [(line["rank"], line["label"]) for line in lines[3:]] == [
            (777, "rank 777 (node-97, device 1), per bin"),
            (900, "rank 900 (node-112, device 4), per bin")]
    norms = next(h for h in data["heatmaps"] if h["id"] == "heat-ranks-local_grad_norm")
    assert len(norms["rows"]) == MAX_ROWS and norms["group"] == 4
    assert norms["rows"][194] == "ranks 776-779"
    grid = cells(norms)
    column = next(c for c, (first, last) in enumerate(norms["steps"]) if first <= 1550 <= last)
    assert norms["steps"][column] == [1501, 1600]
    assert np.argwhere(grid == NAN).tolist() == [[777 // 4, column]]
    worst = np.frombuffer(base64.b64decode(norms["worst"]), np.uint8).reshape(grid.shape)
    assert 777 // 4 * 4 + worst[777 // 4, column] == 777         # the tooltip names it
    assert [(m["row"], m["col"]) for m in norms["marks"]] == [(777 // 4, column)]
    assert not os.path.exists(directory / "rank_0.jsonl")
