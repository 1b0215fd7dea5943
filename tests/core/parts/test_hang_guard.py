"""HangGuard alone, on a real clock and the real watchdog thread: a stuck step is reported
once, with where the training thread waits; steps that keep coming are not."""
import json
import time
from pathlib import Path

from parts_kit import Kit

from mindwatch.background.hangs import HangGuard
from mindwatch.basics.clock import SystemClock

TIMEOUT_S = 0.3


def _guard(kit):
    return HangGuard(timeout_s=TIMEOUT_S, clock=kit.clock, rank=0, policy=kit.policy,
                     **kit.parts())


def _stuck_here(seconds):
    time.sleep(seconds)


def test_a_stuck_step_is_one_hang_with_its_report(tmp_path):
    kit = Kit(tmp_path, SystemClock())
    guard = _guard(kit)
    guard.start(0)
    try:
        guard.beat(kit.clock.perf_counter(), 1)       # the first step ended
        kit.segment.last_step = 1
        _stuck_here(TIMEOUT_S * 5)
    finally:
        guard.stop()
    [hang] = kit.sink.of_kind("anomaly")
    assert hang["anomaly"] == "hang" and hang["step"] == 1
    assert hang["value"] >= TIMEOUT_S and hang["threshold"] == TIMEOUT_S
    assert "_stuck_here" in hang["where"]
    report = json.loads(Path(hang["report"]).read_text())
    [training] = [thread for thread in report["threads"] if thread["training"]]
    assert "_stuck_here" in [frame["function"] for frame in training["stack"]]
    assert [a.kind for a in kit.segment.anomalies] == ["hang"]
    assert kit.segment.stop_requested is None          # "warn": training may come back


def test_steps_that_keep_coming_are_no_hang(tmp_path):
    kit = Kit(tmp_path, SystemClock())
    guard = _guard(kit)
    guard.start(0)
    try:
        for step in range(1, 16):
            time.sleep(TIMEOUT_S / 6)
            guard.beat(kit.clock.perf_counter(), step)
    finally:
        guard.stop()
    assert kit.sink.of_kind("anomaly") == []


def test_a_closed_segment_reports_nothing(tmp_path):
    kit = Kit(tmp_path, SystemClock())
    guard = _guard(kit)
    guard.start(0)
    try:
        guard.beat(kit.clock.perf_counter(), 1)
        kit.segment.closed = True
        time.sleep(TIMEOUT_S * 4)
    finally:
        guard.stop()
    assert kit.sink.records == []
