"""The hang watchdog: a real Monitor whose loop stops calling observe, a real watchdog
thread, real files read while the loop is still stalled; the timeout rules with exact
numbers on a fake clock."""
import io
import json
import subprocess
import sys
import textwrap
import threading
import time

import pytest

from mindwatch import Monitor
from mindwatch.background.watchdog import HangWatchdog, auto_timeout, timeout_in_force
from mindwatch.policy import ABORT_EXIT_STATUS
from mindwatch.report.compare import render_compare
from mindwatch.report.html import render_html
from mindwatch.report.summary import render_text, summarize
from mindwatch.runlog import read_rank_log, read_run

pytestmark = pytest.mark.timeout(60)


def _hang_records(log_path):
    if not log_path.exists():
        return []
    return [r for r in map(json.loads, log_path.read_text().splitlines())
            if r["kind"] == "anomaly" and r["anomaly"] == "hang"]


def stall_in_the_data_loader(log_path, *, count, block_s=1.0, linger_s=0.0, deadline_s=15.0):
    """Stands for a data source that blocks: ``block_s`` in this very frame (the watchdog
    finds it here), then returns the hang records found in the log while still blocked,
    once there are ``count``, after staying blocked ``linger_s`` longer."""
    time.sleep(block_s)
    deadline = time.monotonic() + deadline_s
    while len(_hang_records(log_path)) < count:
        assert time.monotonic() < deadline, "no hang record while the loop was stalled"
        time.sleep(0.02)
    time.sleep(linger_s)
    return _hang_records(log_path)


def _watchdogs(others=frozenset()):
    """The watchdog threads running, but those in ``others`` (left by earlier tests)."""
    return [t for t in threading.enumerate()
            if t.name.startswith("mindwatch-hang-watchdog") and t not in others]


@pytest.mark.waits
def test_a_stall_is_reported_while_it_lasts_once_then_the_run_completes(tmp_path):
    others = frozenset(_watchdogs())
    log_path = tmp_path / "rank_0.jsonl"
    monitor = Monitor(str(tmp_path), stream=io.StringIO(), hang_timeout_s=0.5,
                      hardware_interval_s=0.1)
    for step in (1, 2, 3):
        monitor.observe(step=step, loss=1.0)
        time.sleep(0.02)
    time.sleep(0.15)                            # a hardware sample is taken before the stall
    # Stalled four timeouts long: still one record for this stall.
    [hang] = stall_in_the_data_loader(log_path, count=1, linger_s=1.0)
    assert hang["step"] == 3 and hang["threshold"] == 0.5 and hang["actions"] == ["warn"]
    assert 0.5 <= hang["value"] < 1.5
    assert hang["where"].startswith("stall_in_the_data_loader (test_hang_watchdog.py:")
    assert hang["where"] in hang["message"]
    assert hang["report"] == str(tmp_path / "anomalies" / "hang_step3_rank0.json")
    report = json.loads((tmp_path / "anomalies" / "hang_step3_rank0.json").read_text())
    training = report["threads"][0]
    assert training["training"] and training["name"] == threading.current_thread().name
    assert training["stack"][-1]["function"] == "stall_in_the_data_loader"
    assert training["stack"][-1]["code"] == "time.sleep(block_s)"
    assert any(t["name"] == "mindwatch-hardware" for t in report["threads"])
    assert report["hardware"] is not None and report["hardware"]["rss_gb"] > 0
    assert [row["step"] for row in report["history"]] == [1, 2, 3]
    markdown = (tmp_path / "anomalies" / "hang_step3_rank0.md").read_text()
    assert "in stall_in_the_data_loader" in markdown and "## Latest hardware sample" in markdown
    for step in (4, 5):
        assert [a.kind for a in monitor.observe(step=step, loss=1.0)] == []
    # Steps resumed: a new stall is a new hang.
    records = stall_in_the_data_loader(log_path, count=2)
    assert records[1]["step"] == 5
    monitor.observe(step=6, loss=1.0)
    monitor.close()
    assert not _watchdogs(others)
    log = read_rank_log(str(log_path))
    assert log.end["reason"] == "completed" and log.end["steps"] == 6
    assert [a["step"] for a in log.anomalies] == [3, 5]
    assert [a.kind for a in monitor.anomalies] == ["hang", "hang"]


@pytest.mark.waits
def test_no_hang_after_close_nor_between_segments(tmp_path):
    others = frozenset(_watchdogs())
    log_path = tmp_path / "rank_0.jsonl"
    monitor = Monitor(str(tmp_path), stream=io.StringIO(), hang_timeout_s=0.2,
                      hardware_interval_s=None)
    monitor.observe(step=1, loss=1.0)
    monitor.close()
    assert not _watchdogs(others)
    time.sleep(0.8)                              # four timeouts between two segments
    monitor.start()
    assert len(_watchdogs(others)) == 1
    monitor.observe(step=2, loss=1.0)
    monitor.close()
    time.sleep(0.8)
    assert _hang_records(log_path) == [] and not _watchdogs(others)
    assert [e["reason"] for e in read_rank_log(str(log_path)).of_kind("end")] == \
        ["completed", "completed"]


def test_a_monitor_nobody_closed_nor_holds_takes_its_watchdog_with_it(tmp_path):
    import gc
    others = frozenset(_watchdogs())
    monitor = Monitor(str(tmp_path), stream=io.StringIO(), hang_timeout_s=0.2,
                      hardware_interval_s=None)
    monitor.observe(step=1, loss=1.0)                # a custom loop that forgets close()
    [thread] = _watchdogs(others)
    del monitor
    gc.collect()
    thread.join(timeout=5)
    assert not thread.is_alive()
    assert _hang_records(tmp_path / "rank_0.jsonl") == []


def test_the_timeout_in_force_exact_numbers():
    assert auto_timeout([]) == 600.0
    assert auto_timeout([0.5] * 99 + [1e6]) == 600.0           # 20 x 0.5 s is below the floor
    assert auto_timeout([10.0, 40.0, 50.0]) == 800.0           # 20 x the median, 40 s
    assert auto_timeout([30.0, 40.0]) == 700.0                 # the median of two: 35 s
    assert timeout_in_force(None, [], first_step=True) == 3600.0
    assert timeout_in_force(None, [10.0, 40.0, 50.0], first_step=True) == 4800.0
    assert timeout_in_force(None, [10.0, 40.0, 50.0], first_step=False) == 800.0
    assert timeout_in_force(2.0, [10.0, 40.0, 50.0], first_step=True) == 12.0
    assert timeout_in_force(2.0, [10.0, 40.0, 50.0], first_step=False) == 2.0


def test_the_watchdog_on_a_fake_clock(clock):
    watchdog = HangWatchdog(timeout_s=None, clock=clock, on_hang=lambda stall: None)
    watchdog.start()          # the thread looks every 5 s of real time: it never fires here
    try:
        start = clock.perf
        # The first step (compilation) is allowed 6 x 600 s.
        assert watchdog.check(start + 3599.0) is None
        stall = watchdog.check(start + 3600.0)
        assert (stall.step, stall.stalled_s, stall.timeout_s) == (0, 3600.0, 3600.0)
        assert watchdog.check(start + 9000.0) is None          # once per stall
        watchdog.beat(start + 5000.0, 1)                        # compiled at last
        for step in range(2, 12):                               # 10 steps of 50 s
            watchdog.beat(start + 5000.0 + 50.0 * (step - 1), step)
        last = start + 5500.0
        assert list(watchdog.intervals) == [50.0] * 10          # compilation left out
        assert watchdog.timeout() == 1000.0
        assert watchdog.check(last + 999.0) is None
        stall = watchdog.check(last + 1000.0)
        assert (stall.step, stall.since, stall.timeout_s) == (11, last, 1000.0)
        assert watchdog.is_current(stall)
        watchdog.beat(last + 1200.0, 12)                        # it moved on
        assert not watchdog.is_current(stall)
        assert watchdog.check(last + 2199.0) is None and watchdog.check(last + 2200.5)
    finally:
        watchdog.stop()
    assert not watchdog.running and not watchdog.is_current(stall)


@pytest.mark.parametrize("on_anomaly, message", [
    ({"loss_spike": "abort"}, "valid for 'hang' only"),
    ("abort", "valid for 'hang' only"),
    ({"hang": "stop"}, "on_anomaly['hang'] must be one of 'warn', 'abort'"),
    ({"hang": "skip"}, "on_anomaly['hang'] must be one of 'warn', 'abort'"),
])
def test_abort_is_for_hangs_only(tmp_path, on_anomaly, message):
    with pytest.raises(ValueError, match=message.replace("[", r"\[").replace("]", r"\]")):
        Monitor(str(tmp_path), on_anomaly=on_anomaly)


def test_hang_policies_and_timeout_setting(tmp_path):
    monitor = Monitor(str(tmp_path / "a"), on_anomaly={"hang": "abort"})
    assert monitor.policy.actions_for("hang") == ["abort"]
    assert Monitor(str(tmp_path / "b"), on_anomaly="stop").settings.policies["hang"] == "warn"
    assert Monitor(str(tmp_path / "c")).settings.policies["hang"] == "warn"
    for bad, error in ((0, ValueError), (-1.0, ValueError), (86401, ValueError),
                       (float("inf"), ValueError), (True, TypeError), ("60", TypeError)):
        with pytest.raises(error, match="hang_timeout_s"):
            Monitor(str(tmp_path / "d"), hang_timeout_s=bad)


_ABORTING_LOOP = textwrap.dedent("""
    import sys, threading, time
    from mindwatch import Monitor
    monitor = Monitor(sys.argv[1], hang_timeout_s=0.5, hardware_interval_s=None,
                      on_anomaly={"hang": "abort"})
    for step in (1, 2):
        monitor.observe(step=step, loss=1.0)
    def wait_for_a_peer_forever():
        threading.Event().wait()
    wait_for_a_peer_forever()
""")


def test_abort_writes_the_log_then_exits_with_its_status(tmp_path):
    result = subprocess.run([sys.executable, "-c", _ABORTING_LOOP, str(tmp_path)],
                            capture_output=True, text=True, timeout=30)
    assert result.returncode == ABORT_EXIT_STATUS, result.stderr[-2000:]
    assert f"exiting with status {ABORT_EXIT_STATUS}" in result.stderr
    log = read_rank_log(str(tmp_path / "rank_0.jsonl"))
    assert [r["kind"] for r in log.records] == ["run", "step", "step", "anomaly", "end"]
    [hang] = log.anomalies
    assert hang["actions"] == ["abort"] and hang["step"] == 2
    assert hang["where"].startswith("wait (threading.py:")
    assert "wait_for_a_peer_forever" in hang["where"]
    assert log.end["reason"] == "aborted" and log.end["steps"] == 2
    assert log.end["stopped_by"] == {"anomaly": "hang", "step": 2, "rank": 0}
    report = (tmp_path / "anomalies" / "hang_step2_rank0.md").read_text()
    assert "wait_for_a_peer_forever" in report


@pytest.mark.waits
def test_summary_names_the_ranks_that_hung_and_where(tmp_path):
    monitors = [Monitor(str(tmp_path), rank=rank, world_size=2, stream=io.StringIO(),
                        hang_timeout_s=0.3, hardware_interval_s=None) for rank in (0, 1)]
    for monitor in monitors:
        monitor.observe(step=1, loss=1.0)
    stall_in_the_data_loader(tmp_path / "rank_0.jsonl", count=1)
    stall_in_the_data_loader(tmp_path / "rank_1.jsonl", count=1)
    for monitor in monitors:
        monitor.observe(step=2, loss=1.0)
        monitor.close()
    run = read_run(str(tmp_path))
    summary = summarize(run)
    assert summary["verdict"] == "2 ANOMALIES, HUNG ON RANKS 0, 1"
    assert [(h["rank"], h["step"]) for h in summary["hangs"]] == [(0, 1), (1, 1)]
    assert all("stall_in_the_data_loader" in h["where"] for h in summary["hangs"])
    text = render_text(summary)
    assert "  hung: rank 0 after step 1 (no step end for " in text
    assert "; rank 1 after step 1" in text
    page = render_html(run)
    assert '<div class="hung" id="hung">' in page
    assert page.count("<li>rank ") == 2
    assert "stall_in_the_data_loader (test_hang_watchdog.py:" in page
    # Compared with a run that did not hang, each hang names its run.
    clean = Monitor(str(tmp_path / "clean"), stream=io.StringIO(), hardware_interval_s=None)
    clean.observe(step=1, loss=1.0)
    clean.close()
    page = render_compare([run, read_run(str(tmp_path / "clean"))], ["stalled", "clean"])
    assert '<div class="hung" id="hung">' in page
    assert page.count("<li>stalled: rank ") == 2 and "<li>clean:" not in page
    assert "<li>stalled: rank 1 after step 1 (no step end for " in page
