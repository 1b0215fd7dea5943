"""OverheatDetector and MemoryPressureDetector: exact firing samples, streaks, state."""
import json

import pytest

from mindwatch.anomaly import MEMORY_PRESSURE, OVERHEAT, Anomaly
from mindwatch.detectors.hardware import MemoryPressureDetector, OverheatDetector
from mindwatch.observation import DeviceSample, HardwareSample


def temps(*values, kind="npu"):
    return HardwareSample(time=0.0, devices=[DeviceSample(kind, i, temp_c=t)
                                             for i, t in enumerate(values)])


def run(detector, samples):
    """{sample number (1-based): anomalies} for the samples that fired."""
    fired = {}
    for n, sample in enumerate(samples, 1):
        found = detector.update_hardware(sample)
        if found:
            fired[n] = found
    return fired


def test_overheat_fires_once_per_episode_at_the_third_sample():
    detector = OverheatDetector(max_temperature_c=85.0, consecutive=3)
    fired = run(detector, [temps(t) for t in (80, 85, 90, 91, 95, 96, 70, 86, 87, 88)])
    assert fired == {
        4: [Anomaly(OVERHEAT, None, 91.0, 85.0,
                    "NPU 0 temperature 91 C >= 85 C for 3 consecutive hardware samples")],
        10: [Anomaly(OVERHEAT, None, 88.0, 85.0,
                     "NPU 0 temperature 88 C >= 85 C for 3 consecutive hardware samples")]}


def test_overheat_streaks_are_per_device():
    detector = OverheatDetector(max_temperature_c=80, consecutive=2)
    samples = [temps(81, 70, kind="gpu"), temps(70, 81, kind="gpu"), temps(81, 82, kind="gpu"),
               temps(82, 83, kind="gpu")]
    fired = run(detector, samples)
    assert list(fired) == [3, 4]
    assert [a.message for a in fired[3]] == [
        "GPU 1 temperature 82 C >= 80 C for 2 consecutive hardware samples"]
    assert [(a.value, a.step) for a in fired[4]] == [(82.0, None)]  # GPU 0's own streak


def test_unknown_temperature_neither_counts_nor_resets():
    detector = OverheatDetector(max_temperature_c=85, consecutive=3)
    fired = run(detector, [temps(90), temps(None), temps(float("nan")), HardwareSample(time=0.0),
                           temps(90), temps(90)])
    assert list(fired) == [6]


def test_memory_pressure_on_a_device():
    def used(mb, total=1000.0):
        return HardwareSample(time=0.0, devices=[DeviceSample("npu", 3, mem_used_mb=mb,
                                                              mem_total_mb=total)])

    detector = MemoryPressureDetector(device_fraction=0.95, host_available_fraction=None,
                                      consecutive=2)
    fired = run(detector, [used(940), used(950), used(990), used(999), used(None), used(500),
                           used(960), used(970, None), used(960, 0.0), used(980)])
    assert fired == {
        3: [Anomaly(MEMORY_PRESSURE, None, 0.99, 0.95,
                    "NPU 3 memory 99.0% used (990 of 1000 MB) >= 95% for 2 consecutive "
                    "hardware samples")],
        10: [Anomaly(MEMORY_PRESSURE, None, 0.98, 0.95,
                     "NPU 3 memory 98.0% used (980 of 1000 MB) >= 95% for 2 consecutive "
                     "hardware samples")]}


def test_memory_pressure_on_the_host():
    def host(used, available):
        return HardwareSample(time=0.0, mem_used_gb=used, mem_available_gb=available)

    detector = MemoryPressureDetector(consecutive=2)
    fired = run(detector, [host(60, 4), host(62, 2), host(63, 1), host(63, 1), host(None, 1),
                           host(50, 14), host(63, 1)])
    assert fired == {3: [Anomaly(MEMORY_PRESSURE, None, 1 / 64, 0.05,
                                 "host memory: only 1.6% available (1 of ~64 GB) < 5% "
                                 "for 2 consecutive hardware samples")]}


def test_device_and_host_streaks_are_separate():
    sample = HardwareSample(time=0.0, mem_used_gb=99.0, mem_available_gb=1.0,
                            devices=[DeviceSample("gpu", 0, mem_used_mb=99, mem_total_mb=100),
                                     DeviceSample("gpu", 1, mem_used_mb=10, mem_total_mb=100)])
    detector = MemoryPressureDetector(consecutive=1)
    assert [a.message.split(" memory")[0] for a in detector.update_hardware(sample)] == [
        "GPU 0", "host"]
    assert detector.update_hardware(sample) == []


@pytest.mark.parametrize("make", [
    lambda: OverheatDetector(max_temperature_c=85, consecutive=3),
    lambda: MemoryPressureDetector(consecutive=3)])
def test_state_round_trip_keeps_streaks(make):
    hot = HardwareSample(time=0.0, mem_used_gb=99.0, mem_available_gb=1.0,
                         devices=[DeviceSample("npu", 0, temp_c=99, mem_used_mb=99,
                                               mem_total_mb=100)])
    first = make()
    assert first.update_hardware(hot) == [] and first.update_hardware(hot) == []
    state = json.loads(json.dumps(first.state_dict()))
    resumed = make()
    resumed.load_state_dict(state)
    assert resumed.update_hardware(hot) and not make().update_hardware(hot)
    assert resumed.update_hardware(hot) == []  # the episode goes on: no second alarm


@pytest.mark.parametrize("kwargs, name", [
    (dict(max_temperature_c=float("nan")), "max_temperature_c"),
    (dict(max_temperature_c="85"), "max_temperature_c"),
    (dict(consecutive=0), "consecutive"),
    (dict(consecutive=2.0), "consecutive")])
def test_overheat_bad_arguments(kwargs, name):
    with pytest.raises(ValueError, match=name):
        OverheatDetector(**kwargs)


@pytest.mark.parametrize("kwargs, name", [
    (dict(device_fraction=0), "device_fraction"),
    (dict(device_fraction=1.5), "device_fraction"),
    (dict(host_available_fraction=-0.1), "host_available_fraction"),
    (dict(consecutive=True), "consecutive")])
def test_memory_pressure_bad_arguments(kwargs, name):
    with pytest.raises(ValueError, match=name):
        MemoryPressureDetector(**kwargs)
