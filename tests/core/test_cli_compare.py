"""`mindwatch report RUN_DIR RUN_DIR ...` in real processes: where the page goes, the errors
for a run given twice or a directory that is not a run (one line, exit 2, nothing written),
and --png / --max-points with several runs."""
import io
import json
import os
import re
import subprocess
import sys

import pytest

from mindwatch import Monitor

MINDWATCH = [sys.executable, "-m", "mindwatch.cli"]


def _run(argv, cwd=None):
    return subprocess.run([*MINDWATCH, *map(str, argv)], capture_output=True, text=True,
                          timeout=120, cwd=cwd)


def _rejected(result, *names):
    assert result.returncode == 2, (result.returncode, result.stderr)
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr, result.stderr
    assert result.stderr.startswith("mindwatch report: ")
    for name in names:
        assert name in result.stderr, (name, result.stderr)
    assert result.stdout == ""


def _write(directory, steps, scale, clock):
    monitor = Monitor(str(directory), clock=clock, stream=io.StringIO(),
                      hardware_interval_s=None, on_anomaly="warn")
    for step in range(1, steps + 1):
        clock.advance(0.1)
        monitor.observe(step=step, epoch=1, loss=scale / step, lr=1e-3, grad_norm=1.0)
    monitor.close()


@pytest.fixture
def runs(tmp_path, clock):
    """runs/a (30 steps) and runs/b (50 steps), and a folder to work in."""
    a, b = tmp_path / "runs" / "a", tmp_path / "runs" / "b"
    _write(a, 30, 3.0, clock)
    _write(b, 50, 2.0, clock)
    (tmp_path / "work").mkdir()
    return a, b, tmp_path / "work"


def _data(path):
    page = path.read_text(encoding="utf-8")
    return json.loads(re.search(r'id="mw-data">(.*?)</script>', page, re.S).group(1))


def test_several_runs_default_to_compare_html_in_the_current_directory(runs):
    a, b, work = runs
    result = _run(["report", a, b], cwd=work)
    assert result.returncode == 0 and result.stderr == "", result.stderr
    assert result.stdout == "compare.html\n"
    data = _data(work / "compare.html")
    assert [run["label"] for run in data["runs"]] == ["a", "b"]
    lr = next(p for p in data["panels"] if p["id"] == "lr")
    assert [line["label"] for line in lr["lines"]] == ["a", "b"]
    assert not (a / "report.html").exists() and not (b / "report.html").exists()
    # one run: the page still goes into its directory, and is a page of one run
    result = _run(["report", a], cwd=work)
    assert result.returncode == 0 and result.stdout == f"{a / 'report.html'}\n"
    assert "runs" not in _data(a / "report.html")


def test_output_png_and_max_points_apply_to_several_runs(runs):
    a, b, work = runs
    result = _run(["report", a, b, "-o", work / "ab.html", "--png", work / "png",
                   "--max-points", "10"])
    assert result.returncode == 0, result.stderr
    pngs = [work / "png" / f"{name}.png" for name in ("loss", "lr", "grad_norm", "step_time")]
    assert result.stdout.splitlines() == [str(work / "ab.html"), *map(str, pngs)]
    assert all(path.stat().st_size > 1000 for path in pngs)
    loss = next(p for p in _data(work / "ab.html")["panels"] if p["id"] == "loss")
    assert [line["label"] for line in loss["lines"]] == ["a loss", "a smoothed", "b loss",
                                                         "b smoothed"]
    # 30 and 50 steps, cut to at most 10 points each, the first and the last step kept
    assert all(2 < len(line["x"]) <= 10 for line in loss["lines"]), loss["lines"]
    assert [(line["x"][0], line["x"][-1]) for line in loss["lines"]] == \
        [(1, 30), (1, 30), (1, 50), (1, 50)]
    assert loss["x_range"] == [1, 50]


def test_the_same_run_twice_is_refused(runs, tmp_path):
    a, b, work = runs
    os.symlink(a, tmp_path / "link")
    for again in [a, f"{a}/", f"{a}/../a", tmp_path / "link"]:
        result = _run(["report", a, b, again], cwd=work)
        _rejected(result, "given twice", str(again))
    assert os.listdir(work) == []                               # nothing was written


def test_a_directory_without_run_logs_is_named(runs, tmp_path):
    a, b, work = runs
    empty = tmp_path / "not a run"
    empty.mkdir()
    (empty / "notes.txt").write_text("x")
    _rejected(_run(["report", a, empty, b], cwd=work), f"RUN_DIR {empty}: no rank_<R>.jsonl")
    _rejected(_run(["report", a, tmp_path / "missing"], cwd=work), "no such run directory",
              str(tmp_path / "missing"))
    (empty / "rank_0.jsonl").write_text("not json\n")           # a log that is not a run log
    _rejected(_run(["report", a, empty], cwd=work), "rank_0.jsonl")
    assert os.listdir(work) == []


def test_help_shows_several_run_dirs():
    result = _run(["report", "--help"])
    assert result.returncode == 0
    assert "RUN_DIR [RUN_DIR ...]" in result.stdout and "compare.html" in result.stdout
