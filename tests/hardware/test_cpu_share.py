"""CpuShares against this machine's real processes: a process of the host's own that takes
its CPU shows in this process's wait for one and is named; this process's children are its
own, not others."""
import subprocess
import sys
import time

import psutil
import pytest

import spinners
from mindwatch.hardware.cpu_share import CpuShares


def busy(seconds):
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def _sample(shares, probe_state):
    """One sample with the host's CPU seconds and load since the previous one."""
    times = psutil.cpu_times()
    total = sum(times) - times.guest - times.guest_nice
    busy_s = total - times.idle - times.iowait
    last_total, last_busy = probe_state or (total, busy_s)
    load = 100.0 * (busy_s - last_busy) / (total - last_total) if total > last_total else None
    return shares.sample(total - last_total or None, load), (total, busy_s)


@pytest.fixture
def hogs():
    """As many spinning processes as the host has cores, for 6 s."""
    pids = spinners.start(psutil.cpu_count(), seconds=6)
    yield pids
    spinners.stop(pids)


def _cpu_seconds(pids):
    return {pid: sum(psutil.Process(pid).cpu_times()[:2]) for pid in pids}


def test_other_processes_taking_the_cpu_make_this_one_wait_and_are_named(hogs):
    shares = CpuShares(psutil)
    _, state = _sample(shares, None)
    busy(1.0)
    _, state = _sample(shares, state)          # the top's scan needs one sample before
    before = _cpu_seconds(hogs)
    busy(1.0)
    found, (total, _) = _sample(shares, state)
    after = _cpu_seconds(hogs)
    # spinning against a spinning process on every core: waiting about half the time
    assert found["cpu_wait_s"] >= 0.1
    assert found["process_cpu_percent"] < 100.0 / psutil.cpu_count()
    top = found["cpu_top"]
    assert top and all(entry["name"] for entry in top)
    # the spinners, unless processes that took even more (a loaded host's) filled the top
    hog_share = max(100 * (after[p] - before[p]) / (total - state[0]) for p in hogs)
    named = {entry["pid"] for entry in top}
    assert named & set(hogs) or min(e["cpu_percent"] for e in top) >= 0.8 * hog_share


def test_this_processs_children_are_its_own():
    shares = CpuShares(psutil)
    _, (total_before, _) = _sample(shares, None)
    child = subprocess.Popen([sys.executable, "-c", spinners.SPIN.format(seconds=1.5)])
    try:
        time.sleep(1.2)
        spun = sum(psutil.Process(child.pid).cpu_times()[:2])
        found, (total_after, _) = _sample(shares, (total_before, 0.0))
    finally:
        child.kill()
        child.wait()
    # the child's spinning is this process's (however much of the host it got)
    assert spun > 0.1
    assert found["process_cpu_percent"] >= 0.9 * 100 * spun / (total_after - total_before)
    assert not any(entry["pid"] == child.pid for entry in found["cpu_top"] or ())
