"""HardwareInput alone: a sample's record at once, its findings for the training thread,
and the real sampler thread with the host's own probes."""
import time

from parts_kit import Kit

from mindwatch import MonitorSettings
from mindwatch.background.hardware_input import HardwareInput
from mindwatch.basics.clock import SystemClock
from mindwatch.detectors import build_detectors
from mindwatch.observation import DeviceSample, HardwareSample


def _input(kit, interval_s=None, **settings):
    detectors = build_detectors(MonitorSettings.from_kwargs(**settings))
    return HardwareInput(interval_s=interval_s, all_devices=False, memory_reader=None,
                         detectors=detectors, **kit.parts())


def _hot(clock, temp_c):
    return HardwareSample(time=clock.time(), cpu_percent=10.0, devices=[
        DeviceSample(type="npu", index=0, temp_c=temp_c)])


def test_a_submitted_sample_is_recorded_and_its_finding_waits(tmp_path, clock):
    kit = Kit(tmp_path, clock)
    hardware = _input(kit, max_temperature_c=90.0, overheat_samples=1)
    kit.segment.last_step = 3
    hardware.submit(_hot(clock, 97.0))
    [record] = kit.sink.of_kind("hardware")
    assert record["devices"][0]["temp_c"] == 97.0
    assert kit.sink.of_kind("anomaly") == []            # held for the training thread
    assert [a.kind for a in kit.segment.pending] == ["overheat"]
    [found] = kit.actions.act_on_pending()
    assert found.step == 3 and found.value == 97.0


def test_observe_acts_at_once(tmp_path, clock):
    kit = Kit(tmp_path, clock)
    hardware = _input(kit, max_temperature_c=90.0, overheat_samples=1)
    assert [a.kind for a in hardware.observe(_hot(clock, 95.0))] == ["overheat"]
    assert hardware.observe(_hot(clock, 60.0)) == []
    assert len(kit.sink.of_kind("hardware")) == 2


def test_before_the_segment_starts_or_after_it_ends_nothing_is_written(tmp_path, clock):
    kit = Kit(tmp_path, clock)
    hardware = _input(kit)
    kit.segment.started = False
    hardware.submit(_hot(clock, 50.0))
    kit.segment.started, kit.segment.closed = True, True
    hardware.submit(_hot(clock, 50.0))
    assert kit.sink.records == []


def test_the_sampler_thread_samples_the_host(tmp_path):
    kit = Kit(tmp_path, SystemClock())
    hardware = _input(kit, interval_s=0.05)
    hardware.start()
    hardware.run()
    deadline = time.monotonic() + 10
    while len(kit.sink.of_kind("hardware")) < 3 and time.monotonic() < deadline:
        time.sleep(0.02)
    hardware.stop()
    samples = kit.sink.of_kind("hardware")
    assert len(samples) >= 3 and hardware.sampler is None
    # psutil's first CPU figure is None (it measures between two calls)
    cpu = [s["cpu_percent"] for s in samples if s["cpu_percent"] is not None]
    assert cpu and all(0.0 <= value <= 100.0 for value in cpu)
    assert all(s["mem_used_gb"] > 0 for s in samples)
