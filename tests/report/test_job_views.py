"""The views answer for the job (issue #43): ``mindwatch summary`` and ``watch`` of a run
directory of several ranks, from job.jsonl (written by real Monitors on threads that exchange
through a real SUM: tests/thread_ranks.py) or, without it, from the rank logs condensed."""
import io
import json
import os
import re
import shutil
import socket
import time

import pytest
from rich.console import Console

from mindwatch.cli import main
from mindwatch.report.watch import watch
from mindwatch.runlog.job.view import condense, read_job, read_ranks
from thread_ranks import run_ranks

RANKS = 16
HOSTS = {rank: f"node-{rank // 8}" for rank in range(RANKS)}
NAN_RANK, NAN_STEP = 13, 20


def _train(monitor, rank):
    for step in range(1, 31):
        loss = float("nan") if (rank, step) == (NAN_RANK, NAN_STEP) else \
            2.0 - 0.01 * step + 0.001 * rank
        found = monitor.end_step(step=step, loss=loss, lr=0.01, grad_norm=1.0,
                                 step_time_s=0.1 + 0.001 * rank,
                                 data_time_s=0.05 if rank == 4 else 0.001)
        if any(a.stops for a in found) or monitor.stop_requested:
            break
    monitor.close()


@pytest.fixture(scope="module")
def job_dir(tmp_path_factory):
    """A 16-rank job that a NaN on rank 13 at step 20 stops; each test takes a copy."""
    run = tmp_path_factory.mktemp("job") / "run"
    # straggler_window beyond the run: rank 4's data time stands out without a straggler
    # anomaly, which the job log would tell a step late (at the stop: never)
    run_ranks(RANKS, _train, log_dir=str(run), hosts=HOSTS, hardware_interval_s=None,
              on_anomaly={"loss_nonfinite": "stop"}, straggler_window=100)
    return run


@pytest.fixture
def job(job_dir, tmp_path):
    return shutil.copytree(job_dir, tmp_path / "run")


def _summary(run_dir, capsys, *options):
    code = main(["summary", str(run_dir), *options])
    return code, capsys.readouterr().out


def _event_lines(text):
    return [line for line in text.splitlines() if " at step " in line]


def test_the_summary_of_a_job_is_its_answer(job, capsys):
    code, text = _summary(job, capsys)
    lines = text.splitlines()
    assert code == 1 and len(lines) <= 20
    assert lines[0] == f"{job}: 1 ANOMALY"
    assert lines[1].startswith("  16 ranks on 2 hosts (job.jsonl): steps 1-20, stopped; ")
    # one event for the job, not one per rank: where it came from, what every rank did
    assert _event_lines(text) == [
        "  loss_nonfinite at step 20 on rank 13 (host node-1, device 13) "
        "[stop on all 16 ranks]"]
    assert "    node-1: rank 15 the slowest (largest step time at 20 of 20 steps, " \
           "115.0 ms against a median 107.5 ms)" in lines
    assert any(line.startswith("    node-0: rank 4 the most data time") for line in lines)
    assert lines[-1].startswith("  goodput ")
    assert not any(re.search(r"rank \d+: \d+ steps", line) for line in lines)   # no rank rows
    code, out = _summary(job, capsys, "--json")
    result = json.loads(out)
    assert code == 1 and result["verdict"] == "1 ANOMALY" and result["anomalies"] == 1
    [event] = result["job"]["events"]
    assert (event["origin_rank"], event["origin_host"], event["actions"]) == (13, "node-1",
                                                                              ["stop"])
    assert [(s["rank"], s["what"]) for s in result["job"]["standouts"]][:2] == [
        (15, "slowest"), (4, "data_time")]
    assert result["job"]["silent"] == [] and "ranks" not in result      # no rank log read
    with open(os.path.join(job, "job.jsonl"), encoding="utf-8") as handle:
        end = json.loads(handle.read().splitlines()[-1])
    assert result["goodput"] == end["goodput"] and result["job"]["goodput"] == end["goodput"]


def test_without_the_job_log_the_rank_logs_give_the_same_event(job, capsys):
    _, with_job = _summary(job, capsys)
    os.remove(os.path.join(job, "job.jsonl"))
    code, condensed = _summary(job, capsys)
    assert code == 1 and condensed.splitlines()[0] == f"{job}: 1 ANOMALY"
    assert "(rank logs)" in condensed.splitlines()[1]
    # the rank logs know each rank's host (their run records), not its device
    [line] = _event_lines(condensed)
    assert line == (f"  loss_nonfinite at step 20 on rank 13 (host {socket.gethostname()}) "
                    "[stop on all 16 ranks]")
    place = re.compile(r" \(host [^)]*\)")
    assert [place.sub("", line) for line in _event_lines(with_job)] == [place.sub("", line)]
    view, logs = read_job(str(job)), read_ranks(str(job))
    assert view is None
    again = condense(logs)
    assert list(again.steps) == list(range(1, 21))
    assert again.spreads["step_time_s"].max_rank[0] == 15


def test_a_job_of_1024_ranks_of_copied_logs_fits_in_20_lines(job, tmp_path, capsys):
    copies = tmp_path / "copies"
    copies.mkdir()
    texts = {rank: (job / f"rank_{rank}.jsonl").read_text() for rank in (1, NAN_RANK)}
    for rank in range(1024):
        source = NAN_RANK if rank == NAN_RANK else 1
        text = texts[source].replace(f'"rank":{source},', f'"rank":{rank},')
        (copies / f"rank_{rank}.jsonl").write_text(
            text.replace('"world_size":16', '"world_size":1024'))
    code, text = _summary(copies, capsys)
    lines = text.splitlines()
    assert code == 1 and len(lines) <= 20, text
    assert lines[0] == f"{copies}: 1 ANOMALY"
    assert "1024 ranks" in lines[1]
    [line] = _event_lines(text)
    assert "loss_nonfinite at step 20 on rank 13 " in line and "[stop on all 1024 ranks]" in line
    assert max(map(len, lines)) < 300


@pytest.mark.parametrize("job_log", [True, False])
def test_an_empty_rank_log_is_a_silent_rank_not_an_error(job, capsys, job_log):
    (job / "rank_6.jsonl").write_bytes(b"")
    # its heartbeat (runlog/heartbeats.py) says where it stayed: still starting
    beat = job / "heartbeats" / "rank_6.json"
    beat.parent.mkdir(exist_ok=True)
    at = 1_700_000_000.0
    beat.write_text(json.dumps({
        "rank": 6, "host": "node-0", "device": 6, "pid": 1, "time": at, "interval_s": 1.0,
        "phase": "starting", "step": 0, "since": at - 60, "state": "running",
        "where": "load (data.py:3) <- main (train.py:9)"}))
    if not job_log:
        os.remove(job / "job.jsonl")
    code, text = _summary(job, capsys)
    assert code == 1, text
    assert text.splitlines()[0] == f"{job}: 1 ANOMALY, SILENT RANK 6"
    [silent] = [line for line in text.splitlines() if line.startswith("  silent: ")]
    clock = time.strftime("%H:%M:%S", time.localtime(at))
    assert silent.startswith("  silent: rank 6") and silent.endswith(
        f": no record since start-up; last heartbeat {clock}, never started: still in its "
        "start-up: load (data.py:3) <- main (train.py:9)")
    _, out = _summary(job, capsys, "--json")
    assert [(s["rank"], s["why"]) for s in json.loads(out)["job"]["silent"]] == [
        (6, "no record since start-up")]


def test_a_rank_whose_log_stops_early_is_named_last_seen(job, capsys):
    path = job / "rank_9.jsonl"
    lines = path.read_text().splitlines(keepends=True)
    steps = [i for i, line in enumerate(lines) if '"kind":"step"' in line]
    path.write_text("".join(lines[:steps[-3] + 1]))          # killed after step 18
    beat = job / "heartbeats" / "rank_9.json"          # its last heartbeat: in step 19
    beat.parent.mkdir(exist_ok=True)
    beat.write_text(json.dumps({
        "rank": 9, "host": "node-1", "device": 9, "pid": 1, "time": 1_700_000_000.0,
        "interval_s": 1.0, "phase": "in_step", "step": 19, "since": 1_699_999_999.0,
        "state": "running"}))
    code, text = _summary(job, capsys)
    assert code == 1
    assert "NO END RECORD (running or crashed)" in text.splitlines()[0]
    assert re.search(r"  silent: rank 9 \(host node-1\): last seen at step 18, "
                     r"\d\d:\d\d:\d\d; last heartbeat \d\d:\d\d:\d\d, in step 19$", text,
                     re.M), text


def test_a_single_empty_log_is_still_unreadable(tmp_path, capsys):
    (tmp_path / "rank_0.jsonl").write_bytes(b"")
    assert main(["summary", str(tmp_path)]) == 2
    assert "no run-log record" in capsys.readouterr().err


def test_a_torn_last_line_of_the_job_log_is_skipped(job, capsys):
    with open(job / "job.jsonl", "ab") as handle:
        handle.write(b'{"kind":"job_step","rank":0,"ti')
    view = read_job(str(job))
    assert view.torn_tail and view.skipped_lines == 1 and len(view.steps) == 20
    assert len(view.bins) == 2 and list(view.bins[0]["step_time_s"][:2]) == [0.1, 0.101]
    code, text = _summary(job, capsys)
    assert code == 1 and "1 unreadable line skipped" in text.splitlines()[1]


def test_watch_shows_the_spread_of_the_latest_step(job):
    console = Console(file=io.StringIO(), width=300, force_terminal=False)
    assert watch(str(job), console=console, refresh_s=0.01, timeout_s=30) == 0
    shown = console.file.getvalue()
    assert "job of 16 ranks on 2 hosts (job.jsonl)" in shown
    assert "across ranks at step 20" in shown
    row = next(line for line in shown.splitlines() if line.strip().startswith("step time"))
    assert "100.0 ms on rank 0 (host node-0, device 0)" in row
    assert "107.5 ms" in row and "115.0 ms on rank 15 (host node-1, device 15)" in row
    assert "loss_nonfinite at step 20 on rank 13 (host node-1, device 13)" in shown
    assert "rank 14 " not in shown.replace("rank 14 (", "")      # no row per rank


def test_the_job_follower_holds_a_torn_line_and_reads_a_long_log_from_its_tail(
        job, tmp_path, monkeypatch):
    from mindwatch.runlog import follower as rank_follower
    from mindwatch.runlog.job import follow as job_follow

    lines = (job / "job.jsonl").read_bytes().splitlines(keepends=True)
    grown = tmp_path / "grown"
    grown.mkdir()
    path = grown / "job.jsonl"
    path.write_bytes(b"".join(lines[:5]) + lines[5][:30])
    follower = job_follow.JobFollower(str(grown))
    assert [r["kind"] for r in follower.poll()] == ["run"] + ["job_step"] * 4
    with open(path, "ab") as handle:
        handle.write(lines[5][30:] + b"".join(lines[6:]))
    later = follower.poll()
    assert later[0]["step"] == 5 and later[-1]["kind"] == "end"     # the torn line, whole
    # a log longer than the tail: its run and event records, then the tail's steps
    monkeypatch.setattr(rank_follower, "TAIL_BYTES", 2000)      # the tail both follow
    first = job_follow.JobFollower(str(job)).poll()
    kinds = [r["kind"] for r in first]
    assert kinds[0] == "run" and "event" in kinds and kinds[-1] == "end"
    steps = [r["step"] for r in first if r["kind"] == "job_step"]
    assert steps and steps[-1] == 20 and steps[0] > 1          # only the tail's steps


def test_without_numpy_the_job_summary_says_what_to_install(job, capsys, monkeypatch):
    import sys
    monkeypatch.setitem(sys.modules, "numpy", None)      # what an import then raises
    assert main(["summary", str(job)]) == 2
    err = capsys.readouterr().err
    assert "need numpy" in err and "pip install numpy" in err, err
