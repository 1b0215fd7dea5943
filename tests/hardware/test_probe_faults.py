"""Probe faults end in null values and one message each, and never hold up training or its end.

The fake ``npu-smi`` tools are shell scripts that print the recorded output of
tests/fixtures/npu-smi (or a copy with a card removed), hang, print garbage or fail.
"""
import io
import os
import shlex
import threading
import time

import pytest

from mindwatch import Monitor
from mindwatch.hardware.npu_smi import NpuSmiProbe
from mindwatch.hardware.nvml import NvmlProbe
from mindwatch.hardware.sampler import HardwareSampler, default_probes
from mindwatch.observation import DeviceSample
from mindwatch.runlog import read_rank_log

B1 = "info-23.0.rc3.3-910B1.txt"
MAP = "info-m-910B3.txt"
NPU0 = DeviceSample("npu", 0, 55.0, 65099.0, 65536.0, 41.0, 271.1)
NPU1 = DeviceSample("npu", 1, 66.0, 65098.0, 65536.0, 42.0, 275.0)
RANK_VARS = ("ASCEND_RT_VISIBLE_DEVICES", "DEVICE_ID", "LOCAL_RANK",
             "OMPI_COMM_WORLD_LOCAL_RANK", "MS_LOCAL_RANK")


def tool(tmp_path, body):
    """``bin/npu-smi`` running ``body``; ``$N`` is the number of this ``info`` call (``info
    -m`` is not counted) and the script's pid is in ``pid``."""
    exe = tmp_path / "bin" / "npu-smi"
    exe.parent.mkdir(exist_ok=True)
    count = shlex.quote(str(tmp_path / "count"))
    exe.write_text(f'#!/bin/sh\necho $$ > {shlex.quote(str(tmp_path / "pid"))}\n'
                   f'if [ "$2" = "-m" ]; then N=0; else N=$(( $(cat {count} 2>/dev/null '
                   f'|| echo 0) + 1 )); echo $N > {count}; fi\n{body}\n')
    exe.chmod(0o755)
    return exe


def info_calls(tmp_path):
    """How many ``info`` calls ``tool``'s script has counted so far. The script rewrites the
    file while it runs, so it can be read empty: that counts as none yet."""
    path = tmp_path / "count"
    text = path.read_text().strip() if path.exists() else ""
    return int(text) if text else 0


def one_card(tmp_path, fixtures):
    """The recorded table with its second card's block cut out: what npu-smi prints once a
    card has fallen off the bus."""
    lines = (fixtures / B1).read_text().splitlines(keepends=True)
    path = tmp_path / "one-card.txt"
    path.write_text("".join(lines[:9] + lines[12:]))
    return path


def cat(path):
    return f"cat {shlex.quote(str(path))}"


def alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split(")")[-1].split()[0] != "Z"    # a zombie has ended
    except FileNotFoundError:
        return False


def wait_for(condition, timeout=5.0):
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def test_a_card_that_disappears_gives_null_values_and_one_message(tmp_path, npu_smi_fixtures):
    one = one_card(tmp_path, npu_smi_fixtures)
    full, mapping = npu_smi_fixtures / B1, npu_smi_fixtures / MAP
    exe = tool(tmp_path, f'if [ "$2" = "-m" ]; then {cat(mapping)}; '
                         f'elif [ $N -eq 1 ] || [ $N -ge 4 ]; then {cat(full)}; '
                         f'else {cat(one)}; fi')
    probe = NpuSmiProbe(executable=str(exe))
    gone = DeviceSample("npu", 1)
    assert [probe.sample() for _ in range(4)] == [[NPU0, NPU1], [NPU0, gone], [NPU0, gone],
                                                  [NPU0, NPU1]]
    assert probe.pop_new_messages() == [
        f"NPU 1 is no longer in '{exe} info' (it was before); its values are null while it "
        "is missing"]


def test_an_error_for_one_chip(tmp_path, npu_smi_fixtures):
    # the second card's readings as the tool prints a chip it cannot query, and its status
    text = (npu_smi_fixtures / B1).read_text()
    text = text.replace("| 1     910B1               | OK            | 275.0       42     ",
                        "| 1     910B1               | Critical      | NA          NA     ")
    text = text.replace("| 0000:01:00.0  | 66          0    / 0          65098/ 65536  ",
                        "| 0000:01:00.0  | -           0    / 0          NA   / NA     ")
    (tmp_path / "info.txt").write_text(text)
    exe = tool(tmp_path, f"{cat(tmp_path / 'info.txt')}; "
                         "echo 'dcmi get device info failed, card 1 ret -8020' >&2; exit 2")
    probe = NpuSmiProbe(executable=str(exe))
    for _ in range(3):
        assert probe.sample() == [NPU0, DeviceSample("npu", 1, None, None, None, None, None)]
    assert probe.pop_new_messages() == [
        f"'{exe} info' exited with status 2: dcmi get device info failed, card 1 ret -8020",
        f"'{exe} info -m' exited with status 2: dcmi get device info failed, card 1 ret -8020"]


@pytest.mark.parametrize("failure, message", [
    ("printf '\\377\\376\\000garbage\\n'", "printed no NPU table (first line: '\ufffd\ufffd"),
    ("exit 9", "exited with status 9"),
    ("exec sleep 10", "gave no answer within 0.3 s; NPU samples are null while it hangs"),
])
def test_a_tool_that_breaks_after_working(tmp_path, npu_smi_fixtures, failure, message):
    exe = tool(tmp_path, f'if [ $N -eq 1 ]; then {cat(npu_smi_fixtures / B1)}; '
                         f'else {failure}; fi')
    probe = NpuSmiProbe(executable=str(exe), timeout_s=0.3)
    assert probe.sample() == [NPU0, NPU1]
    probe.pop_new_messages()
    for _ in range(3):
        assert probe.sample() == [DeviceSample("npu", 0), DeviceSample("npu", 1)]
    [said] = probe.pop_new_messages()
    assert message in said


def test_a_hung_mapping_call_is_asked_again(tmp_path, npu_smi_fixtures):
    # with positions for logic ids this rank (logic id 0 = card 4 here) would get card 3
    text = (npu_smi_fixtures / B1).read_text()
    text = text.replace("| 0     910B1", "| 4     910B1").replace("| 1     910B1", "| 3     910B1")
    (tmp_path / "info.txt").write_text(text)
    hung = tmp_path / "hang-once"
    hung.write_text("")
    exe = tool(tmp_path, f'if [ "$2" = "-m" ]; then if [ -e {hung} ]; then rm {hung}; '
                         f'exec sleep 5; fi; {cat(npu_smi_fixtures / MAP)}; '
                         f'else {cat(tmp_path / "info.txt")}; fi')
    probe = NpuSmiProbe(executable=str(exe), devices=[0], timeout_s=0.3)
    assert [s.index for s in probe.sample()] == [0]       # positions: card 4 came first
    assert probe.sample() == [DeviceSample("npu", 0, 66.0, 65098.0, 65536.0, 42.0, 275.0)]
    assert len(probe.pop_new_messages()) == 1


def test_interrupt_kills_a_hung_call_and_its_children(tmp_path):
    # no exec: the shell waits on a child, as a wrapper script around the real tool would
    exe = tool(tmp_path, f"sleep 30 & echo $! > {shlex.quote(str(tmp_path / 'child'))}; wait")
    probe = NpuSmiProbe(executable=str(exe), timeout_s=60)
    got = []
    thread = threading.Thread(target=lambda: got.append(probe.sample()))
    thread.start()
    assert wait_for(lambda: (tmp_path / "child").exists() and (tmp_path / "child").read_text())
    shell, child = (int((tmp_path / name).read_text()) for name in ("pid", "child"))
    started = time.monotonic()
    probe.interrupt()
    thread.join(5)
    assert time.monotonic() - started < 1.0 and got == [[]]
    assert wait_for(lambda: not alive(shell) and not alive(child), timeout=2)
    assert probe.pop_new_messages() == []          # a kill on the way out is no problem
    assert probe.sample() == [] and (tmp_path / "count").read_text().strip() == "1"


def test_sampler_close_does_not_wait_for_a_hung_npu_smi(tmp_path):
    exe = tool(tmp_path, f"sleep 30 & echo $! > {shlex.quote(str(tmp_path / 'child'))}; wait")
    got = []
    sampler = HardwareSampler(interval_s=0.05, on_sample=got.append,
                              devices=[NpuSmiProbe(executable=str(exe), timeout_s=60)])
    sampler.start()
    assert wait_for(lambda: (tmp_path / "child").exists() and (tmp_path / "child").read_text())
    started = time.monotonic()
    sampler.close()
    assert time.monotonic() - started < 1.0
    child = int((tmp_path / "child").read_text())
    assert wait_for(lambda: not alive(child), timeout=2)
    assert wait_for(lambda: "mindwatch-hardware" not in
                    [t.name for t in threading.enumerate()], timeout=2)
    assert got == [] and sampler.pop_new_messages() == []


class StuckNvml:
    """pynvml whose utilisation query blocks, as on a GPU in a bad state: no subprocess to
    kill, so close() can only stop waiting."""
    NVML_TEMPERATURE_GPU = 0

    def __init__(self):
        self.release, self.entered = threading.Event(), threading.Event()

    def nvmlInit(self):
        pass

    def nvmlShutdown(self):
        pass

    def nvmlDeviceGetCount(self):
        return 1

    def nvmlDeviceGetHandleByIndex(self, index):
        return index

    def nvmlDeviceGetUtilizationRates(self, handle):
        self.entered.set()
        self.release.wait(30)
        raise RuntimeError("GPU is lost")


def test_sampler_close_is_bounded_for_a_probe_that_cannot_be_interrupted():
    nvml = StuckNvml()
    got = []
    sampler = HardwareSampler(interval_s=0.05, on_sample=got.append,
                              devices=[NvmlProbe(module=nvml)])
    sampler.start()
    assert nvml.entered.wait(5)
    started = time.monotonic()
    sampler.close()
    assert time.monotonic() - started < 1.5
    nvml.release.set()                 # the call returns at last: nothing is sampled after
    time.sleep(0.2)
    assert got == []


def test_a_lost_gpu_is_one_message():
    class LostAfterFirst(StuckNvml):
        calls = 0

        def nvmlDeviceGetComputeRunningProcesses(self, handle):     # nobody on it
            return []

        def nvmlDeviceGetUtilizationRates(self, handle):
            self.calls += 1
            if self.calls > 1:
                raise RuntimeError("GPU is lost")
            return type("U", (), {"gpu": 30})()

        def nvmlDeviceGetMemoryInfo(self, handle):
            if self.calls > 1:
                raise RuntimeError("GPU is lost")
            return type("M", (), {"used": 2**30, "total": 2**34})()

        def nvmlDeviceGetTemperature(self, handle, sensor):
            if self.calls > 1:
                raise RuntimeError("GPU is lost")
            return 50

        def nvmlDeviceGetPowerUsage(self, handle):
            if self.calls > 1:
                raise RuntimeError("GPU is lost")
            return 100_000

    probe = NvmlProbe(module=LostAfterFirst())
    assert probe.sample() == [DeviceSample("gpu", 0, 30.0, 1024.0, 16384.0, 50.0, 100.0)]
    for _ in range(3):
        assert probe.sample() == [DeviceSample("gpu", 0)]
    assert probe.pop_new_messages() == [
        "NVML: GPU 0 does not answer (RuntimeError: GPU is lost); its values are null while "
        "it does not"]


def test_npu_smi_without_x_bit_on_path_is_said_once(tmp_path, npu_smi_fixtures, monkeypatch):
    exe = tool(tmp_path, cat(npu_smi_fixtures / B1))
    exe.chmod(0o644)
    probes = default_probes(env={"PATH": str(exe.parent)})
    [probe] = probes["devices"]
    sampler = HardwareSampler(interval_s=1, on_sample=lambda sample: None, **probes)
    samples = [sampler.sample_once() for _ in range(5)]
    assert all(s.devices == [] for s in samples) and not probe.enabled
    messages = [m for m in sampler.pop_new_messages() if "npu-smi" in m]
    assert len(messages) == 1 and "PermissionError" in messages[0]
    assert not (tmp_path / "count").exists()


@pytest.fixture
def npu_smi_on_path(tmp_path, monkeypatch):
    for name in RANK_VARS:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")


def test_training_never_waits_on_a_hung_probe(tmp_path, npu_smi_on_path):
    tool(tmp_path, f"sleep 30 & echo $! > {shlex.quote(str(tmp_path / 'child'))}; wait")
    monitor = Monitor(tmp_path / "run", stream=io.StringIO(), hardware_interval_s=0.05)
    slowest = 0.0
    for step in range(1, 31):
        started = time.monotonic()
        monitor.observe(step=step, loss=1.0, grad_norm=1.0, step_time_s=0.01)
        slowest = max(slowest, time.monotonic() - started)
        time.sleep(0.01)
    assert (tmp_path / "child").exists()           # the probe was hanging meanwhile
    started = time.monotonic()
    monitor.close()
    assert time.monotonic() - started < 1.2 and slowest < 0.25
    assert wait_for(lambda: not alive(int((tmp_path / "child").read_text())), timeout=2)
    log = read_rank_log(monitor.log_path)
    assert log.end["reason"] == "completed" and len(log.steps) == 30


def test_monitor_logs_null_values_and_one_notice_for_a_lost_card(tmp_path, npu_smi_fixtures,
                                                                  npu_smi_on_path):
    one = one_card(tmp_path, npu_smi_fixtures)
    tool(tmp_path, f'if [ "$2" = "-m" ]; then {cat(npu_smi_fixtures / MAP)}; '
                   f'elif [ $N -eq 1 ]; then {cat(npu_smi_fixtures / B1)}; else {cat(one)}; fi')
    monitor = Monitor(tmp_path / "run", stream=io.StringIO(), hardware_interval_s=0.02)
    step = 0
    try:
        while step < 500 and info_calls(tmp_path) < 5:
            step += 1
            monitor.observe(step=step, loss=1.0, step_time_s=0.01)
            time.sleep(0.01)
    finally:
        monitor.close()
    log = read_rank_log(monitor.log_path)
    npus = [[(d["index"], d["temp_c"]) for d in r["devices"] if d["type"] == "npu"]
            for r in log.of_kind("hardware")]
    assert npus[0] == [(0, 41.0), (1, 42.0)]
    assert len(npus) >= 4 and all(n == [(0, 41.0), (1, None)] for n in npus[1:])
    notices = [r["message"] for r in log.of_kind("notice") if "NPU" in r["message"]]
    assert notices == [f"NPU 1 is no longer in '{tmp_path / 'bin' / 'npu-smi'} info' (it was "
                       "before); its values are null while it is missing"]
