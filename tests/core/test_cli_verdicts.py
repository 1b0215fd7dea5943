"""`mindwatch summary` tells each way a run can end from a healthy one: real training
processes (a plain `Monitor` loop, no MindSpore) that complete, fail, get SIGTERM, abort or
are SIGKILLed, then the real `mindwatch summary` command on their logs."""
import json
import re
import signal
import subprocess
import sys
import textwrap
import time

import pytest

MINDWATCH = [sys.executable, "-m", "mindwatch.cli"]

TRAINER = textwrap.dedent("""
    import sys, time
    from mindwatch import Monitor
    log_dir, ending, rank = sys.argv[1], sys.argv[2], int(sys.argv[3])
    monitor = Monitor(log_dir, rank=rank, world_size=int(sys.argv[4]), resume=True,
                      hardware_interval_s=None, on_anomaly="warn", print_interval=1000)
    for step in range(1, 100_000):
        loss = float("nan") if ending == "nan_then_kill" and step == 2 else 1.0 / step
        monitor.observe(step=step, epoch=1, loss=loss, grad_norm=1.0)
        if step == 3 and ending == "completed":
            monitor.close()
            sys.exit(0)
        if step == 3 and ending == "aborted":
            monitor.close(reason="aborted")
            sys.exit(0)
        if step == 3 and ending == "error":
            try:
                raise RuntimeError("the data loader broke")
            except RuntimeError as exc:
                monitor.close(error=f"RuntimeError: {exc}")
                raise
        if monitor.stop_requested:       # SIGTERM: the monitor stopped the run at step end
            break
        time.sleep(0.01)
    monitor.close()
""")


def _train(tmp_path, run_dir, ending, rank=0, world_size=1):
    """Runs the trainer; for the endings that need a signal, sends it once 3 steps are in."""
    script = tmp_path / "trainer.py"
    script.write_text(TRAINER)
    log = run_dir / f"rank_{rank}.jsonl"
    before = log.read_bytes().count(b'"kind":"step"') if log.exists() else 0
    process = subprocess.Popen([sys.executable, str(script), str(run_dir), ending, str(rank),
                                str(world_size)], stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
    try:
        if ending in ("signal", "kill", "nan_then_kill"):
            deadline = time.monotonic() + 60
            while not (log.exists() and log.read_bytes().count(b'"kind":"step"') >= before + 3):
                assert time.monotonic() < deadline and process.poll() is None
                time.sleep(0.02)
            process.send_signal(signal.SIGTERM if ending == "signal" else signal.SIGKILL)
        process.wait(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
    return process.returncode


def _summary(run_dir):
    text = subprocess.run([*MINDWATCH, "summary", str(run_dir)], capture_output=True,
                          text=True, timeout=60)
    as_json = subprocess.run([*MINDWATCH, "summary", str(run_dir), "--json"],
                             capture_output=True, text=True, timeout=60)
    assert text.stderr == "" and as_json.stderr == "" and text.returncode == as_json.returncode
    return text.returncode, text.stdout, json.loads(as_json.stdout)


@pytest.mark.parametrize("ending, status, verdict, end", [
    ("completed", 0, "HEALTHY", "completed"),
    ("error", 1, "FAILED", "error"),
    ("signal", -signal.SIGTERM, "STOPPED BY SIGNAL", "signal"),
    ("aborted", 0, "ABORTED", "aborted"),
    ("kill", -signal.SIGKILL, "NO END RECORD (running or crashed)",
     "running or crashed (no end record)"),
])
def test_each_ending_has_its_verdict_and_exit_code(tmp_path, ending, status, verdict, end):
    run_dir = tmp_path / "run"
    assert _train(tmp_path, run_dir, ending) == status
    code, text, result = _summary(run_dir)
    assert code == (0 if ending == "completed" else 1)
    assert text.splitlines()[0] == f"{run_dir}: {verdict}"
    assert f"rank 0: 3 steps, {end}" in text or ending in ("signal", "kill")
    assert result["verdict"] == verdict and result["exit_code"] == code
    assert result["healthy"] is (ending == "completed")
    assert result["ranks"][0]["end"] == end and result["anomalies"] == 0


def test_a_killed_segment_after_a_completed_one_is_not_healthy(tmp_path):
    run_dir = tmp_path / "run"
    assert _train(tmp_path, run_dir, "completed") == 0
    assert _summary(run_dir)[0] == 0
    assert _train(tmp_path, run_dir, "kill") == -signal.SIGKILL      # resume=True: appended
    code, text, result = _summary(run_dir)
    assert code == 1 and result["verdict"] == "NO END RECORD (running or crashed)"
    assert "running or crashed (no end record)" in text


def test_anomalies_and_a_crash_are_both_named(tmp_path):
    run_dir = tmp_path / "run"
    assert _train(tmp_path, run_dir, "nan_then_kill") == -signal.SIGKILL
    code, text, result = _summary(run_dir)
    assert code == 1
    assert result["verdict"] == "1 ANOMALY, NO END RECORD (running or crashed)"
    assert "loss_nonfinite at step 2: loss is nan at step 2 [warn]" in text


def test_one_rank_that_did_not_end_spoils_the_run(tmp_path):
    run_dir = tmp_path / "run"
    assert _train(tmp_path, run_dir, "completed", rank=0, world_size=2) == 0
    assert _train(tmp_path, run_dir, "kill", rank=1, world_size=2) == -signal.SIGKILL
    code, text, result = _summary(run_dir)
    assert code == 1 and [r["end"] for r in result["ranks"]] == [
        "completed", "running or crashed (no end record)"]
    assert text.splitlines()[0].endswith(": NO END RECORD (running or crashed)")


def _recovered_log(run_dir, count):
    """A finished one-rank log of ``count`` steps, each withheld (on_anomaly "skip") and
    then rewound, each with its anomaly, and ``count`` unreadable lines after the run record:
    every counted noun of the summary text at that count."""
    run_dir.mkdir()
    lines = [json.dumps({"kind": "run", "rank": 0, "time": 1.0, "schema": 1, "world_size": 1,
                         "host": "h", "pid": 1, "config": {}, "versions": {}})]
    lines += ["}{"] * count                        # torn or foreign lines: skipped, counted
    for step in range(1, count + 1):
        lines.append(json.dumps({"kind": "step", "rank": 0, "time": 1.0 + step, "step": step,
                                 "epoch": 1, "loss": 2.0, "loss_smooth": 2.0, "lr": 1e-3,
                                 "grad_norm": 1.0, "step_time_s": 0.5, "skipped": True}))
        lines.append(json.dumps({"kind": "anomaly", "rank": 0, "time": 1.5 + step,
                                 "anomaly": "loss_spike", "step": step, "value": 2.0,
                                 "threshold": 1.0, "message": f"spike {step}",
                                 "actions": ["rewind"], "checkpoint": None, "report": None}))
        lines.append(json.dumps({"kind": "rewind", "rank": 0, "time": 1.6 + step,
                                 "step": step, "to_step": step - 1, "anomaly": "loss_spike",
                                 "rewinds": step, "origin_rank": 0}))
    lines.append(json.dumps({"kind": "end", "rank": 0, "time": 9.0, "reason": "completed",
                             "steps": count, "elapsed_s": 8.0}))
    (run_dir / "rank_0.jsonl").write_text("\n".join(lines) + "\n")


@pytest.mark.parametrize("count, verdict, rank_line", [
    (1, "1 ANOMALY", "  rank 0: 1 step, completed in 8.00 s; loss 2 -> 2 (smoothed); "
     "1 update withheld; 1 rewind (step 1 -> 0); 1 unreadable line skipped (line 2)"),
    (2, "2 ANOMALIES", "  rank 0: 2 steps, completed in 8.00 s; loss 2 -> 2 (smoothed); "
     "2 updates withheld; 2 rewinds (step 1 -> 0, step 2 -> 1); "
     "2 unreadable lines skipped (lines 2, 3)"),
])
def test_every_count_in_the_summary_text_agrees_in_number(tmp_path, count, verdict,
                                                          rank_line):
    run_dir = tmp_path / "run"
    _recovered_log(run_dir, count)
    code, text, result = _summary(run_dir)
    assert code == 1 and result["verdict"] == verdict
    assert result["skipped_steps"] == count and result["rewinds"] == count
    assert text.splitlines()[:2] == [f"{run_dir}: {verdict}", rank_line]


def test_the_summary_of_a_running_run_says_when_it_will_end(tmp_path):
    """A live process 100 steps into 1000 at ~10 ms a step: the summary, while it runs, gives
    each rank's time of arrival from its latest step record."""
    run_dir = tmp_path / "run"
    script = tmp_path / "long.py"
    script.write_text(textwrap.dedent("""
        import sys, time
        from mindwatch import Monitor
        monitor = Monitor(sys.argv[1], hardware_interval_s=None, total_steps=1000)
        for step in range(1, 1001):
            monitor.observe(step=step, loss=1.0)
            time.sleep(0.01)
        monitor.close()
    """))
    process = subprocess.Popen([sys.executable, str(script), str(run_dir)],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        log = run_dir / "rank_0.jsonl"
        deadline = time.monotonic() + 60
        while not (log.exists() and log.read_bytes().count(b'"kind":"step"') >= 100):
            assert time.monotonic() < deadline and process.poll() is None
            time.sleep(0.02)
        code, text, result = _summary(run_dir)
    finally:
        process.kill()
        process.wait(timeout=60)
    [rank] = result["ranks"]
    assert code == 1 and rank["end"] == "running or crashed (no end record)"
    steps_done = rank["steps"]
    # ~10 ms a step for the steps left: between 5 and 30 s, whatever the machine's load
    assert 100 <= steps_done < 1000 and 0.005 * (1000 - steps_done) < rank["eta_s"] < 30
    # (the text was asked for a moment before the JSON: a few steps fewer)
    assert re.search(r"rank 0: \d+ steps, running or crashed \(no end record\), ETA \d", text)
