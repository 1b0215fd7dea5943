"""HardwareSampler: timing, failure isolation, and default_probes with a fake npu-smi."""
import os
import shlex
import threading
import time

import pytest

from mindwatch.hardware.npu_smi import NpuSmiProbe
from mindwatch.hardware.nvml import NvmlProbe
from mindwatch.hardware.sampler import HardwareSampler, default_probes
from mindwatch.observation import DeviceSample, HardwareSample

HOST = {"cpu_percent": 12.5, "mem_used_gb": 3.0, "mem_available_gb": 5.0, "rss_gb": 0.25}
DEVICE = DeviceSample("npu", 0, 50.0, 1000.0, 65536.0, 60.0, 200.0)
RANK_VARS = ("ASCEND_RT_VISIBLE_DEVICES", "DEVICE_ID", "LOCAL_RANK",
             "OMPI_COMM_WORLD_LOCAL_RANK", "MS_LOCAL_RANK")


class Fake:
    def __init__(self, value, fail_every=0):
        self.value, self.fail_every, self.calls = value, fail_every, 0

    def sample(self):
        self.calls += 1
        if self.fail_every and self.calls % self.fail_every == 0:
            raise RuntimeError(f"probe broke on call {self.calls}")
        return self.value


def wait_for(condition, timeout=3.0):
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.005)
    return True


def test_samples_on_schedule_and_stops_promptly():
    got = []
    sampler = HardwareSampler(interval_s=0.05, on_sample=got.append, host=Fake(HOST),
                              devices=[Fake([DEVICE])],
                              framework_memory=Fake({"allocated_mb": 1.0}), clock=lambda: 42.0)
    started = time.monotonic()
    sampler.start()
    sampler.start()  # idempotent: still one thread
    assert wait_for(lambda: len(got) >= 1, timeout=0.5)  # the first sample comes at once
    assert wait_for(lambda: len(got) >= 5)
    elapsed = time.monotonic() - started
    before = time.monotonic()
    assert sampler.stop() is True
    assert time.monotonic() - before < 0.5
    assert sampler.stop() is True and not sampler.running
    count = len(got)
    time.sleep(0.15)
    assert len(got) == count  # nothing after stop
    assert elapsed >= 0.2 - 0.02  # 5 samples on a 0.05 s grid, the first at t=0
    assert count <= elapsed / 0.05 + 3  # no burst
    assert got[0] == HardwareSample(time=42.0, **HOST, devices=[DEVICE],
                                    framework_memory={"allocated_mb": 1.0})
    assert sampler.latest is got[-1] and sampler.samples == count and sampler.errors == 0
    assert [t.name for t in threading.enumerate()].count("mindwatch-hardware") == 0


def test_survives_raising_probe_and_callback_and_reports_once():
    calls = []

    def on_sample(sample):
        calls.append(sample)
        if len(calls) % 2:
            raise ValueError("sink is full")

    broken = Fake([DEVICE], fail_every=1)
    sampler = HardwareSampler(interval_s=0.05, on_sample=on_sample, host=Fake(HOST, fail_every=2),
                              devices=[broken, Fake([DEVICE])])
    sampler.start()
    try:
        assert wait_for(lambda: len(calls) >= 4)
    finally:
        assert sampler.stop()
    assert all(s.devices == [DEVICE] for s in calls)  # the healthy probe still counts
    assert any(s.cpu_percent is None for s in calls) and any(s.cpu_percent == 12.5 for s in calls)
    assert sampler.errors >= len(calls) + len(calls) // 2
    messages = sampler.pop_new_messages()
    assert sorted(messages) == sorted([
        "hardware sampler: Fake (devices) raised RuntimeError: probe broke on call 1; "
        "sampling goes on (reported once)",
        "hardware sampler: Fake (host) raised RuntimeError: probe broke on call 2; "
        "sampling goes on (reported once)",
        "hardware sampler: on_sample raised ValueError: sink is full; "
        "sampling goes on (reported once)"])
    assert sampler.pop_new_messages() == []


def test_stop_from_on_sample_and_restart():
    got = []
    holder = {}

    def on_sample(sample):
        got.append(sample)
        holder["stopped"] = holder["sampler"].stop()

    sampler = holder["sampler"] = HardwareSampler(interval_s=0.05, on_sample=on_sample)
    sampler.start()
    assert wait_for(lambda: "stopped" in holder)
    time.sleep(0.12)
    assert len(got) == 1 and holder["stopped"] and not sampler.running
    sampler.start()
    assert wait_for(lambda: len(got) == 2)
    sampler.stop()


def test_sample_once_and_probe_messages_are_collected():
    nvml = NvmlProbe(module=object())  # no nvmlInit: turns off with a message
    got = []
    sampler = HardwareSampler(interval_s=1, on_sample=got.append, devices=[nvml])
    sample = sampler.sample_once()
    assert got == [sample] and sampler.latest is sample
    assert sample.devices == [] and sample.cpu_percent is None and sample.framework_memory is None
    [message] = sampler.pop_new_messages()
    assert message.startswith("NVML unavailable (AttributeError")


@pytest.mark.parametrize("interval", [0, -1, float("nan"), "2", True])
def test_bad_interval(interval):
    with pytest.raises(ValueError, match="interval_s"):
        HardwareSampler(interval_s=interval, on_sample=print)


def fake_npu_smi(tmp_path, fixtures):
    info = shlex.quote(str(fixtures / "info-23.0.rc3.3-910B1.txt"))
    mapping = shlex.quote(str(fixtures / "info-m-910B3.txt"))
    exe = tmp_path / "bin" / "npu-smi"
    exe.parent.mkdir()
    exe.write_text(f'#!/bin/sh\nif [ "$2" = "-m" ]; then cat {mapping}; else cat {info}; fi\n')
    exe.chmod(0o755)
    return exe


def test_default_probes_pick_npu_smi_on_path(tmp_path, monkeypatch, npu_smi_fixtures):
    exe = fake_npu_smi(tmp_path, npu_smi_fixtures)
    for name in RANK_VARS:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("PATH", f"{exe.parent}{os.pathsep}{os.environ['PATH']}")
    probes = default_probes()
    assert [type(p) for p in probes["devices"]] == [NpuSmiProbe]    # no NVIDIA driver here
    got = []
    sample = HardwareSampler(interval_s=1, on_sample=got.append, **probes).sample_once()
    npus = [d for d in sample.devices if d.type == "npu"]
    assert [(d.index, d.temp_c) for d in npus] == [(0, 41.0), (1, 42.0)]
    assert sample.mem_used_gb > 0 and got == [sample]
    # this rank's device only, from an explicit environment
    one = default_probes(env={"PATH": str(exe.parent), "DEVICE_ID": "1"})
    assert [(d.index, d.temp_c) for d in one["devices"][0].sample()] == [(1, 42.0)]
    assert len(default_probes(env={"PATH": str(exe.parent), "DEVICE_ID": "1"},
                              all_devices=True)["devices"][0].sample()) == 2


def test_default_probes_without_npu_smi(tmp_path):
    probes = default_probes(env={"PATH": str(tmp_path)}, framework_reader=lambda: {"a_mb": 2})
    assert probes["devices"] == []          # neither npu-smi nor an NVIDIA driver here
    fake_driver = tmp_path / "nvidia-smi"
    fake_driver.write_text("#!/bin/sh\n")
    fake_driver.chmod(0o755)
    with_driver = default_probes(env={"PATH": str(tmp_path)})
    assert [type(p) for p in with_driver["devices"]] == [NvmlProbe]
    assert probes["framework_memory"].sample() == {"a_mb": 2.0}
