"""HostProbe against the real psutil of this machine, and a failing stand-in."""
import os
import threading
import time
from types import SimpleNamespace

import psutil
import pytest

from mindwatch.hardware.host import HostProbe


def busy(seconds):
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


class _Times(tuple):
    """Like psutil's scputimes: a tuple whose fields are also attributes."""

    def __new__(cls, user, system, idle):
        return super().__new__(cls, (user, system, idle))

    user = property(lambda self: self[0])
    system = property(lambda self: self[1])
    idle = property(lambda self: self[2])


def test_real_values_are_plausible():
    began = time.perf_counter()
    probe = HostProbe()
    busy(0.15)
    sample = probe.sample()
    elapsed = time.perf_counter() - began
    assert set(sample) == {"cpu_percent", "mem_used_gb", "mem_available_gb", "rss_gb",
                           "process_cpu_percent", "cpu_wait_s", "cpu_top"}
    assert 0 <= sample["cpu_percent"] <= 100 * (os.cpu_count() or 1)
    assert sample["cpu_percent"] > 0  # we just burnt CPU time in the interval
    # ... at most about one core of this host's (less when other processes took some; the
    # two are read a moment apart)
    assert 0 < sample["process_cpu_percent"] <= 100 / psutil.cpu_count() + 10
    # each of this process's threads waited for a CPU at most the time that went by (the
    # busy one alone, on a quiet host; on a loaded one, others too)
    assert 0 <= sample["cpu_wait_s"] <= elapsed * psutil.Process().num_threads()
    total_gb = psutil.virtual_memory().total / 1e9
    assert 0 < sample["mem_used_gb"] <= total_gb
    assert 0 < sample["mem_available_gb"] <= total_gb
    assert sample["mem_used_gb"] + sample["mem_available_gb"] == pytest.approx(total_gb, rel=0.05)
    assert 0.001 < sample["rss_gb"] < total_gb  # a Python process with pytest holds > 1 MB
    assert sample["rss_gb"] == pytest.approx(psutil.Process().memory_info().rss / 1e9, rel=0.2)
    assert probe.pop_new_messages() == []


def test_cpu_baseline_belongs_to_the_probe_not_the_thread():
    # psutil.cpu_percent(interval=None) keys its baseline by thread: sampled on a thread
    # other than the one that primed it, it would answer a meaningless 0.0 first.
    probe = HostProbe()
    busy(0.15)
    got = []
    thread = threading.Thread(target=lambda: got.append(probe.sample()["cpu_percent"]))
    thread.start()
    thread.join()
    assert got[0] is not None and got[0] > 0


def test_no_elapsed_cpu_time_is_unknown_not_zero():
    fake = SimpleNamespace(cpu_times=lambda: _Times(1.0, 1.0, 8.0),
                           Process=lambda: SimpleNamespace(
                               memory_info=lambda: SimpleNamespace(rss=2e9)),
                           virtual_memory=lambda: SimpleNamespace(used=3e9, available=5e9))
    probe = HostProbe(psutil_module=fake, shares=False)
    assert probe.sample() == {"cpu_percent": None, "mem_used_gb": 3.0,
                              "mem_available_gb": 5.0, "rss_gb": 2.0,
                              "process_cpu_percent": None, "cpu_wait_s": None, "cpu_top": None}


def test_cpu_percent_from_time_deltas():
    readings = iter([_Times(10.0, 5.0, 85.0), _Times(13.0, 6.0, 91.0)])
    fake = SimpleNamespace(cpu_times=lambda: next(readings),
                           Process=lambda: SimpleNamespace(memory_info=lambda: None),
                           virtual_memory=lambda: None)
    probe = HostProbe(psutil_module=fake)
    assert probe.cpu_percent() == 40.0  # 4 busy of 10 elapsed


def test_failing_calls_give_none_and_one_message_each():
    def broken():
        raise OSError("no /proc")

    fake = SimpleNamespace(cpu_times=broken, virtual_memory=broken,
                           Process=lambda: SimpleNamespace(memory_info=broken))
    probe = HostProbe(psutil_module=fake, shares=False)     # (cpu_share.py: test_cpu_share)
    for _ in range(3):
        assert probe.sample() == dict.fromkeys(
            ["cpu_percent", "mem_used_gb", "mem_available_gb", "rss_gb", "process_cpu_percent",
             "cpu_wait_s", "cpu_top"])
    messages = probe.pop_new_messages()
    assert messages == [f"host probe: psutil {what} failed (OSError: no /proc); that field is null"
                        for what in ("cpu_times", "virtual_memory", "memory_info")]
    assert probe.pop_new_messages() == []


def test_missing_psutil_says_how_to_install(monkeypatch):
    import builtins

    real_import = builtins.__import__

    def no_psutil(name, *args, **kwargs):
        if name == "psutil":
            raise ImportError("No module named 'psutil'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_psutil)
    with pytest.raises(ImportError, match="pip install psutil"):
        HostProbe()
