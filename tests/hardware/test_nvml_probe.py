"""NvmlProbe against a stand-in for pynvml, and against the real pynvml of this machine."""
from types import SimpleNamespace

import pytest

from mindwatch.hardware.nvml import NvmlProbe
from mindwatch.observation import DeviceSample

MiB = 2 ** 20


class NVMLError(Exception):
    pass


class FakeNvml:
    """Emulates the pynvml calls NvmlProbe makes; ``broken`` names calls that raise."""

    NVML_TEMPERATURE_GPU = 0
    NVMLError = NVMLError

    def __init__(self, gpus, broken=()):
        self.gpus = gpus
        self.broken = set(broken)
        self.calls = []

    def _call(self, name):
        self.calls.append(name)
        if name in self.broken:
            raise NVMLError(f"{name}: Not Supported")

    def nvmlInit(self):
        self._call("init")

    def nvmlShutdown(self):
        self._call("shutdown")

    def nvmlDeviceGetCount(self):
        self._call("count")
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index):
        self._call("handle")
        return ("handle", index)

    def nvmlDeviceGetUtilizationRates(self, handle):
        self._call("util")
        return SimpleNamespace(gpu=self.gpus[handle[1]]["util"], memory=3)

    def nvmlDeviceGetMemoryInfo(self, handle):
        self._call("memory")
        gpu = self.gpus[handle[1]]
        return SimpleNamespace(used=gpu["used"], total=gpu["total"],
                               free=gpu["total"] - gpu["used"])

    def nvmlDeviceGetTemperature(self, handle, sensor):
        self._call("temperature")
        assert sensor == self.NVML_TEMPERATURE_GPU
        return self.gpus[handle[1]]["temp"]

    def nvmlDeviceGetPowerUsage(self, handle):
        self._call("power")
        return self.gpus[handle[1]]["mw"]

    def nvmlDeviceGetComputeRunningProcesses(self, handle):
        self._call("processes")
        return [SimpleNamespace(pid=pid, usedGpuMemory=used)
                for pid, used, _ in self.gpus[handle[1]].get("processes", ())]

    def nvmlDeviceGetProcessUtilization(self, handle, since):
        self._call("process utilization")
        found = [SimpleNamespace(pid=pid, smUtil=util, timeStamp=1000)
                 for pid, _, util in self.gpus[handle[1]].get("processes", ())
                 if util is not None and since < 1000]
        if not found:
            raise NVMLError("Not Found")           # NVML's answer when no sample is new
        return found

    def nvmlSystemGetProcessName(self, pid):
        self._call("process name")
        return f"/usr/bin/python{pid % 10}".encode()


GPUS = [dict(util=87, used=30_000 * MiB, total=81_559 * MiB, temp=71, mw=312_456),
        dict(util=0, used=512 * MiB, total=81_559 * MiB, temp=35, mw=61_000)]
EXPECTED = [DeviceSample("gpu", 0, 87.0, 30_000.0, 81_559.0, 71.0, 312.456),
            DeviceSample("gpu", 1, 0.0, 512.0, 81_559.0, 35.0, 61.0)]


def test_exact_values_and_units():
    nvml = FakeNvml(GPUS)
    probe = NvmlProbe(module=nvml)
    assert probe.sample() == EXPECTED
    assert probe.sample() == EXPECTED
    assert probe.enabled and probe.pop_new_messages() == []
    # initialised once, handles fetched once
    assert nvml.calls.count("init") == 1 and nvml.calls.count("handle") == 2


def test_device_filter():
    assert NvmlProbe(devices=[1], module=FakeNvml(GPUS)).sample() == EXPECTED[1:]


def test_init_failure_turns_the_probe_off_with_one_message():
    nvml = FakeNvml(GPUS, broken={"init"})
    probe = NvmlProbe(module=nvml)
    for _ in range(3):
        assert probe.sample() == []
    assert not probe.enabled
    assert probe.pop_new_messages() == [
        "NVML unavailable (NVMLError: init: Not Supported); GPU sampling is off"]
    assert probe.pop_new_messages() == []
    assert nvml.calls == ["init"]  # once off, no more NVML calls


def test_one_failing_query_loses_one_field():
    probe = NvmlProbe(module=FakeNvml(GPUS, broken={"temperature"}))
    for _ in range(2):
        assert probe.sample() == [DeviceSample(s.type, s.index, s.util_percent, s.mem_used_mb,
                                               s.mem_total_mb, None, s.power_w) for s in EXPECTED]
    # one message for the kind of failure, not one per GPU or per sample
    assert probe.pop_new_messages() == [
        "NVML temperature failed on GPU 0 (NVMLError: temperature: Not Supported); "
        "that field is null"]
    assert probe.enabled


def test_no_gpu_turns_off_and_shuts_down():
    nvml = FakeNvml([])
    probe = NvmlProbe(module=nvml)
    assert probe.sample() == [] and not probe.enabled
    assert probe.pop_new_messages() == ["NVML sees no GPU; GPU sampling is off"]
    assert nvml.calls == ["init", "count", "shutdown"]


def test_garbage_from_the_module_never_raises():
    nvml = FakeNvml(GPUS)
    nvml.nvmlDeviceGetMemoryInfo = lambda handle: "not an object"
    nvml.nvmlDeviceGetUtilizationRates = lambda handle: SimpleNamespace(gpu="n/a")
    [first, _] = NvmlProbe(module=nvml).sample()
    assert first == DeviceSample("gpu", 0, None, None, None, 71.0, 312.456)


def test_close_releases_and_next_sample_reinitialises():
    nvml = FakeNvml(GPUS)
    probe = NvmlProbe(module=nvml)
    probe.sample()
    probe.close()
    probe.close()
    assert nvml.calls.count("shutdown") == 1
    assert probe.sample() == EXPECTED and nvml.calls.count("init") == 2


def test_real_pynvml_without_driver_is_off_not_an_error():
    # the real bindings: in the locks, but not in a venv with only mindwatch's runtime extras
    pynvml = pytest.importorskip("pynvml", reason="nvidia-ml-py is not installed: pip install "
                                                  "'mindwatch[nvidia]'")
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        pass
    else:
        pynvml.nvmlShutdown()
        pytest.skip("this machine has a working NVIDIA driver")
    probe = NvmlProbe()
    assert probe.sample() == [] and probe.sample() == []
    assert not probe.enabled
    [message] = probe.pop_new_messages()
    assert message.startswith("NVML unavailable (NVMLError") and message.endswith(
        "GPU sampling is off")
    assert message == probe.disabled_reason


def test_the_other_processes_on_this_processs_gpu():
    """GPU 0 runs this process (pid 100) and another that takes 60% of its SMs; GPU 1 runs
    only another rank's process: not this rank's device, its processes are not listed."""
    gpus = [dict(GPUS[0], processes=[(100, 20_000 * MiB, 30), (4242, 9_000 * MiB, 60)]),
            dict(GPUS[1], processes=[(101, 500 * MiB, None)])]
    probe = NvmlProbe(module=FakeNvml(gpus), own_pids=[100])
    first, second = probe.sample()
    assert first.others == [{"pid": 4242, "name": "python2", "mem_used_mb": 9000.0,
                             "util_percent": 60.0}]
    assert second.others is None
    # NVML keeps the utilisation samples: none is new the second time, the share unknown
    first, _ = probe.sample()
    assert first.others == [{"pid": 4242, "name": "python2", "mem_used_mb": 9000.0,
                             "util_percent": None}]
    assert probe.pop_new_messages() == []
