"""`mindwatch demo` as a user runs it, beside other processes that take the host's CPU
halfway through: its slowdown is a throughput_drop whose cause is "host", naming them."""
import json
import os
import re
import statistics
import subprocess
import sys
import time

import psutil
import pytest

import spinners
from host_story import host_story
from mindwatch.runlog import read_rank_log

MINDWATCH = [sys.executable, "-m", "mindwatch.cli"]

# On make test's last worker (tests/waits_scheduling.py): beside the two that compute, not
# beside an msrun job whose ranks start at once, which slows the demo before the spinners
# start (seen: a drop at step 131 the run's own compute was blamed for)
pytestmark = pytest.mark.waits


def _step_times(path) -> list[float]:
    if not os.path.exists(path):
        return []
    with open(path, "rb") as handle:
        lines = handle.read().splitlines()
    return [json.loads(line)["step_time_s"] for line in lines
            if b'"kind":"step"' in line and line.endswith(b"}")]


def test_the_demo_slowed_by_other_processes_says_the_host(tmp_path):
    run = tmp_path / "run"
    log_path = run / "rank_0.jsonl"
    demo = subprocess.Popen([*MINDWATCH, "demo", "--out", str(run), "--steps", "240"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    others, slowdowns = [], []
    try:
        # its baseline learned (50 warm-up steps, then windows of 20)
        deadline = time.monotonic() + 120
        while len(_step_times(log_path)) < 130 and demo.poll() is None:
            assert time.monotonic() < deadline, "the demo did not reach step 130"
            time.sleep(0.1)
        spun_at = time.time()
        # The baseline was learned beside whatever else ran (make test's computing workers, whose
        # load the 1-minute load average shows late): spinners are added until the demo's steps
        # are clearly slower than its steady ones, 2.5x (the rule's factor is 1.5), so that the
        # premise is measured, not hoped for (seen in CI: 6 spinners beside a load of 2.6
        # slowed it too little for any rule)
        steady = statistics.median(_step_times(log_path)[50:130])
        load = os.getloadavg()[0]
        batch = int(1.5 * psutil.cpu_count()) + round(load)
        while demo.poll() is None and len(others) < 8 * batch:
            others += spinners.start(batch, seconds=120)
            counted = len(_step_times(log_path))
            while demo.poll() is None and len(_step_times(log_path)) < counted + 8:
                time.sleep(0.05)
            recent = _step_times(log_path)[counted:]
            slowdowns.append(statistics.median(recent) / steady if recent else 0.0)
            if slowdowns[-1] >= 2.5:
                break
        # slow for a window's median (20 steps), then the host is the demo's again
        while demo.poll() is None and len(_step_times(log_path)) < counted + 24:
            time.sleep(0.05)
        spinners.stop(others)
        _, stderr = demo.communicate(timeout=300)
    finally:
        demo.kill()
        spinners.stop(others)
    assert demo.returncode == 0, stderr
    log = read_rank_log(str(run / "rank_0.jsonl"))
    assert log.end["reason"] == "completed"
    drops = [a for a in log.anomalies if a["anomaly"] == "throughput_drop"]
    assert drops and {a["anomaly"] for a in log.anomalies} == {"throughput_drop"}, \
        (f"load {load:.1f} when the spinners began; {len(others)} spinners, the demo's "
         f"slowdowns as they were added {slowdowns}", log.anomalies)
    assert all(a["cause"] == "host" for a in drops), host_story(log)
    # the sampler named the spinners; a drop that began once they spun names the processes
    # the sampler saw take the most since then: the spinners, unless the host's other load
    # (the other test workers' processes) took more (on a loaded host a drop that began
    # before may still be going on: one alarm per episode)
    samples = log.of_kind("hardware")
    assert any(h["cpu_wait_s"] and h["cpu_wait_s"] > 0.1 for h in samples)
    # the spinners, unless the host's other load had been named before they began (another
    # test worker saturating the host: that scan stands for TOP_EVERY_S, and the spinners
    # cannot raise the others' share by another TOP_SHARE to start a new one)
    named_before = any(h["cpu_top"] for h in samples if h["time"] < spun_at)
    assert named_before or any(entry["pid"] in others for h in samples
                               for entry in h["cpu_top"] or ()), (
        f"spinners {others} from {spun_at:.2f}; each sample's time, host and own CPU %, "
        "wait and top: " + "; ".join(
            f"{h['time']:.2f} {h['cpu_percent']} {h.get('process_cpu_percent')} "
            f"{h.get('cpu_wait_s')} {h.get('cpu_top')}" for h in samples))
    for drop in drops:
        if drop["step"] <= 130:
            continue
        named = {int(pid): float(share) for pid, share in
                 re.findall(r"pid (\d+) \S+ ([\d.]+)%", drop["message"])}
        seen = [entry for h in samples if h["time"] <= drop["time"]
                for entry in h["cpu_top"] or ()]
        assert named and set(named) <= {entry["pid"] for entry in seen}, drop["message"]
        spun = max((entry["cpu_percent"] for entry in seen if entry["pid"] in others),
                   default=0.0)
        assert set(named) & set(others) or max(named.values()) >= spun, drop["message"]
