"""Several runs on one page: labels, the table of runs, curves named and coloured per run on
one step axis, anomalies and settings per run, PNGs. The page in a real browser is tested in
test_browser.py; the command line in tests/core/test_cli_compare.py."""
import math
import os
import re

from event_rows import expected_events
from PIL import Image
from test_html import embedded_data

from mindwatch.basics import format as fmt
from mindwatch.report.compare import render_compare, write_compare_pngs
from mindwatch.report.overlay import PALETTE, shade
from mindwatch.report.runs import run_labels


def test_labels_are_basenames_made_unique_by_the_fewest_parent_parts(tmp_path, monkeypatch):
    assert run_labels(["runs/a", "runs/b/"]) == ["a", "b"]
    assert run_labels(["x/seed1", "y/seed1", "y/seed2"]) == ["x/seed1", "y/seed1", "seed2"]
    assert run_labels(["p/x/run", "q/x/run"]) == ["p/x/run", "q/x/run"]
    # one path is the tail of the other: the shorter one is named in full
    assert run_labels(["/run", "/a/run"]) == ["/run", "a/run"]
    monkeypatch.chdir(tmp_path)
    assert run_labels([".", "../other"]) == [tmp_path.name, "other"]


def _rows(page, table):
    body = re.search(rf'<table class="{table}">.*?<tbody>(.*?)</tbody>', page, re.S).group(1)
    return re.findall(r"<tr([^>]*)>(.*?)</tr>", body, re.S)


def _cells(row):
    return re.findall(r"<td([^>]*)>(.*?)</td>", row, re.S)


def test_table_of_runs_equals_the_logs(two_runs):
    dirs, runs = two_runs
    page = render_compare(runs, run_labels(dirs))
    rows = _rows(page, "runs")
    assert [re.search(r'data-run="([^"]+)"', attrs).group(1) for attrs, _ in rows] == \
        ["lr-high", "lr-low"]
    for (_, row), run in zip(rows, runs, strict=True):
        cells = _cells(row)
        steps = run.ranks[0].steps
        finite = [s for s in steps if math.isfinite(s["loss"])]
        assert cells[1][1] == str(len(run.ranks))
        assert cells[2][1] == str(steps[-1]["step"])
        # the last finite loss of rank 0, exactly as logged, shown as the charts show it
        attrs, shown = cells[3]
        assert float(re.search(r'data-value="([^"]+)"', attrs).group(1)) == finite[-1]["loss"]
        assert f'title="at step {finite[-1]["step"]}"' in attrs
        assert shown == fmt.number(finite[-1]["loss"])
        elapsed = max(log.end["elapsed_s"] for log in run.ranks)
        assert cells[4][1] == fmt.duration(elapsed)
        # no pause, restart or withheld step: all of the run's time trained
        assert re.fullmatch(r"100\.0% of \S+ s", cells[5][1])
        assert cells[6][1] == "completed"
        kinds = [a["anomaly"] for a in run.anomalies]
        assert cells[7][1] == str(len(kinds))
        assert sorted(cells[8][1].split(", ")) == sorted(set(kinds))
    # lr-high's last loss is NaN: its final loss is step 59's, not the NaN
    assert runs[0].ranks[0].steps[-1]["step"] == 60 and 'title="at step 59"' in rows[0][1]


def test_curves_are_named_and_coloured_per_run_on_one_axis(two_runs):
    dirs, runs = two_runs
    data, _ = embedded_data(render_compare(runs, run_labels(dirs)))
    panels = {p["id"]: p for p in data["panels"]}
    assert list(panels) == ["loss", "lr", "grad_norm", "step_time", "throughput",
                            "spread_loss", "spread_step_time"]
    assert [ln["label"] for ln in panels["lr"]["lines"]] == \
        ["lr-high", "lr-low rank 0", "lr-low rank 1"]
    assert [ln["label"] for ln in panels["loss"]["lines"]] == [
        "lr-high loss", "lr-high smoothed", "lr-low rank 0 loss", "lr-low rank 0 smoothed",
        "lr-low rank 1 loss", "lr-low rank 1 smoothed"]
    assert [ln["label"] for ln in panels["spread_loss"]["lines"]] == \
        ["lr-low min", "lr-low median", "lr-low max"]
    # each curve holds its run's values; the runs share the x axis though their lengths differ
    for line, run, rank in zip(panels["grad_norm"]["lines"], [runs[0], runs[1], runs[1]],
                               [0, 0, 1], strict=True):
        steps = run.ranks[rank].steps
        assert (line["run"], line["rank"]) == (runs.index(run), rank)
        assert line["x"] == [s["step"] for s in steps]
        assert line["y"] == [s["grad_norm"] for s in steps]
    assert all(p["x_range"] == [1, 80] and p["axis"]["x"] == [1, 80] for p in panels.values())
    colours = [ln["colour"] for ln in panels["lr"]["lines"]]
    assert colours == [PALETTE[0], PALETTE[1], shade(PALETTE[1], 1, 2)]
    assert colours[2] != colours[1]
    # the runs' grad_explode differ: both limits are drawn, each named after its run
    assert sorted((h["label"], h["y"]) for h in panels["grad_norm"]["hlines"]
                  if "explode" in h["label"]) == [("lr-high: grad_explode 100", 100.0),
                                                  ("lr-low: grad_explode 200", 200.0)]


def test_anomalies_and_settings_say_which_run(two_runs):
    dirs, runs = two_runs
    page = render_compare(runs, run_labels(dirs))
    data, _ = embedded_data(page)
    expected = [(label, a["step"], a["rank"], a["anomaly"])
                for label, run in zip(["lr-high", "lr-low"], runs, strict=True)
                for a in run.anomalies]
    assert [(["lr-high", "lr-low"][a["run"]], a["step"], a["rank"], a["kind"])
            for a in data["anomalies"]] == expected
    table = re.findall(r'<tr data-run="([^"]+)" data-step="(\d+)" data-rank="(\d+)" '
                       r'data-kind="([\w ]+)"><td>([^<]+)</td>', page)
    # one row per event: a step's anomalies on one rank
    events = [(label, step, rank, " ".join(kinds))
              for label, run in zip(["lr-high", "lr-low"], runs, strict=True)
              for log in run.ranks for step, rank, kinds in expected_events(log.anomalies)]
    assert [(r, int(s), int(k), kind) for r, s, k, kind, _ in table] == events
    assert len(events) < len(expected)                  # an explosion is several anomalies
    assert all(r == first for r, *_, first in table)           # the run is the first cell
    assert ("lr-low", 40, 1, "gradient_explode") in expected
    assert ("lr-high", 60, 0, "loss_nonfinite") in expected
    settings = {re.search(r"<td>([^<]+)</td>", row).group(1): (attrs, _cells(row))
                for attrs, row in _rows(page, "config")}
    attrs, cells = settings["world_size"]
    assert "differs" in attrs and [c for _, c in cells[1:]] == ["1", "2"]
    attrs, cells = settings["loss_smoothing"]
    assert "differs" not in attrs and cells[1][1] == cells[2][1]
    assert "<th>lr-high</th><th>lr-low</th>" in page


def test_pngs_draw_every_run(two_runs, tmp_path):
    dirs, runs = two_runs
    paths = write_compare_pngs(runs, run_labels(dirs), str(tmp_path / "png"), width=600,
                               height=240)
    assert [os.path.basename(p) for p in paths] == ["loss.png", "lr.png", "grad_norm.png",
                                                     "step_time.png"]
    with Image.open(paths[2]) as image:
        present = {c for _, c in image.convert("RGB").getcolors(maxcolors=1 << 16)}
    for colour in PALETTE[:2]:            # both runs' curves are in the gradient-norm chart
        assert tuple(int(colour[i:i + 2], 16) for i in (1, 3, 5)) in present, colour
