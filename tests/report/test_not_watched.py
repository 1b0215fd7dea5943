"""No run is called HEALTHY that mindwatch could not watch (report/watched.py): a segment
holding a notice with ``unwatched``, or whose step records hold no loss and no gradient norm,
gets the verdict NOT WATCHED with the fix, exit 1, in ``mindwatch summary`` (text, JSON, a
real process), the HTML report and ``mindwatch watch``. Run logs written by the core
Monitor."""
import io
import json
import subprocess
import sys
from html import escape

from rich.console import Console

from mindwatch import Monitor
from mindwatch.report.html import render_html
from mindwatch.report.summary import render_text, summarize
from mindwatch.report.watch import watch
from mindwatch.report.watched import NO_VALUES
from mindwatch.runlog import read_run

FIX = "call monitor.protect(optimizer) before training, so each step's gradient norm is read"


def write(directory, clock, *, losses=True, fix=None, resume=False, steps=4, rank=0,
          world_size=1):
    """One segment of ``steps`` steps, with losses and norms or with neither, its first step
    followed by a notice naming ``fix`` when given."""
    monitor = Monitor(str(directory), rank=rank, world_size=world_size, clock=clock,
                      stream=io.StringIO(), hardware_interval_s=None, resume=resume)
    for step in range(1, steps + 1):
        clock.advance(0.1)
        if losses:
            monitor.observe(step=step, loss=2.0 - 0.1 * step, grad_norm=1.0)
        else:
            monitor.observe(step=step)
        if step == 1 and fix:
            monitor.notice(f"mindwatch cannot watch this run: {fix}", unwatched=fix)
    monitor.close()


def strip_notices(directory):
    """The log as an older mindwatch, or a writer that forgot, left it: no notice at all."""
    path = directory / "rank_0.jsonl"
    kept = [line for line in path.read_text().splitlines()
            if json.loads(line)["kind"] != "notice"]
    path.write_text("\n".join(kept) + "\n")


def cli_summary(directory, *options):
    done = subprocess.run([sys.executable, "-m", "mindwatch.cli", "summary", str(directory),
                           *options], capture_output=True, text=True, timeout=60)
    return done.returncode, done.stdout


def test_a_notice_unwatched_is_the_verdict_with_its_fix(tmp_path, clock):
    write(tmp_path / "run", clock, fix=FIX)
    summary = summarize(read_run(str(tmp_path / "run")))
    assert summary["verdict"] == f"NOT WATCHED: {FIX}"
    assert summary["healthy"] is False and summary["exit_code"] == 1
    assert summary["unwatched"] == [{"rank": 0, "fix": FIX}]
    status, out = cli_summary(tmp_path / "run")
    assert status == 1 and out.splitlines()[0] == f"{tmp_path / 'run'}: NOT WATCHED: {FIX}"
    status, out = cli_summary(tmp_path / "run", "--json")
    assert status == 1 and json.loads(out)["verdict"] == f"NOT WATCHED: {FIX}"


def test_steps_without_a_loss_or_a_norm_are_not_watched(tmp_path, clock):
    write(tmp_path / "run", clock, losses=False)
    summary = summarize(read_run(str(tmp_path / "run")))
    # whatever notice the monitor wrote (its own fix), the verdict is not HEALTHY
    assert summary["verdict"].startswith("NOT WATCHED: ") and summary["exit_code"] == 1
    strip_notices(tmp_path / "run")
    summary = summarize(read_run(str(tmp_path / "run")))
    assert summary["verdict"] == f"NOT WATCHED: {NO_VALUES}"
    assert summary["anomalies"] == 0 and summary["ranks"][0]["end"] == "completed"
    status, out = cli_summary(tmp_path / "run")
    assert status == 1 and f"NOT WATCHED: {NO_VALUES}" in out.splitlines()[0]


def test_the_latest_segment_decides_and_an_earlier_one_says_it_was_not_watched(tmp_path,
                                                                              clock):
    write(tmp_path / "run", clock, fix=FIX)
    write(tmp_path / "run", clock, resume=True)           # the fix applied, resumed
    summary = summarize(read_run(str(tmp_path / "run")))
    assert summary["verdict"] == "HEALTHY" and summary["exit_code"] == 0
    text = render_text(summary)
    assert "segment 1 (steps 1-4, completed in" in text
    assert f"earlier: loss 1.9 -> 1.6; no anomaly; not watched: {FIX}" in text
    write(tmp_path / "run", clock, losses=False, resume=True)
    strip_notices(tmp_path / "run")
    summary = summarize(read_run(str(tmp_path / "run")))
    assert summary["verdict"] == f"NOT WATCHED: {NO_VALUES}"


def test_one_rank_not_watched_is_named(tmp_path, make_clock):
    write(tmp_path / "run", make_clock(), world_size=2)
    write(tmp_path / "run", make_clock(), world_size=2, rank=1, fix=FIX)
    summary = summarize(read_run(str(tmp_path / "run")))
    assert summary["verdict"] == f"NOT WATCHED ON RANK 1: {FIX}"


def test_the_html_report_and_watch_say_it_too(tmp_path, clock):
    write(tmp_path / "run", clock, fix=FIX)
    html = render_html(read_run(str(tmp_path / "run")))
    assert f"1 rank, no anomalies, NOT WATCHED: {escape(FIX)};" in html
    console = Console(file=io.StringIO(), width=400, force_terminal=False)
    assert watch(str(tmp_path / "run"), console=console, refresh_s=0.01, timeout_s=30) == 0
    shown = console.file.getvalue()
    assert "completed, not watched" in shown and f"NOT WATCHED: {FIX}" in shown
    # a watched run's status stays as it was
    write(tmp_path / "healthy", clock)
    console = Console(file=io.StringIO(), width=400, force_terminal=False)
    watch(str(tmp_path / "healthy"), console=console, refresh_s=0.01, timeout_s=30)
    assert "not watched" not in console.file.getvalue().lower()
