"""NpuSmiProbe against a fake ``npu-smi`` script that prints recorded output or misbehaves."""
import os
import shlex
import subprocess
import time
from types import SimpleNamespace

import pytest

from mindwatch.hardware.npu_smi import MAX_MISSING_TRIES, NpuSmiProbe, visible_devices_from_env
from mindwatch.observation import DeviceSample

B1 = "info-23.0.rc3.3-910B1.txt"
MAP = "info-m-910B3.txt"
B1_SAMPLES = [DeviceSample("npu", 0, 55.0, 65099.0, 65536.0, 41.0, 271.1),
              DeviceSample("npu", 1, 66.0, 65098.0, 65536.0, 42.0, 275.0)]


def fake_npu_smi(tmp_path, body, name="npu-smi"):
    """An executable shell script; every call appends its arguments to calls.log."""
    path = tmp_path / "bin" / name
    path.parent.mkdir(exist_ok=True)
    log = shlex.quote(str(tmp_path / "calls.log"))
    path.write_text(f'#!/bin/sh\necho "$*" >> {log}\n{body}\n')
    path.chmod(0o755)
    return path


def calls(tmp_path):
    log = tmp_path / "calls.log"
    return log.read_text().splitlines() if log.exists() else []


def printing(info_file, map_file):
    return (f'if [ "$2" = "-m" ]; then cat {shlex.quote(str(map_file))}; '
            f'else cat {shlex.quote(str(info_file))}; fi')


def test_fixture_through_path(tmp_path, monkeypatch, npu_smi_fixtures):
    fake_npu_smi(tmp_path, printing(npu_smi_fixtures / B1, npu_smi_fixtures / MAP))
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    probe = NpuSmiProbe()
    for _ in range(3):
        assert probe.sample() == B1_SAMPLES  # the recorded mapping names other cards
    assert probe.pop_new_messages() == [] and probe.last_error is None
    assert calls(tmp_path) == ["info", "info -m", "info", "info"]  # the mapping is asked once


def test_logic_ids_from_mapping_and_device_filter(tmp_path, npu_smi_fixtures):
    # derived from the recorded table: its cards renumbered 4 and 3 so that the recorded
    # `info -m` (card 3 -> logic 0, card 4 -> logic 1) applies and differs from positions
    text = (npu_smi_fixtures / B1).read_text()
    text = text.replace("| 0     910B1", "| 4     910B1").replace("| 1     910B1", "| 3     910B1")
    (tmp_path / "info.txt").write_text(text)
    exe = fake_npu_smi(tmp_path, printing(tmp_path / "info.txt", npu_smi_fixtures / MAP))
    assert [s.index for s in NpuSmiProbe(executable=str(exe)).sample()] == [1, 0]
    [only] = NpuSmiProbe(executable=str(exe), devices=[0]).sample()
    assert only == DeviceSample("npu", 0, 66.0, 65098.0, 65536.0, 42.0, 275.0)
    assert NpuSmiProbe(executable=str(exe), devices=[7]).sample() == []


def test_hanging_tool_times_out(tmp_path):
    exe = fake_npu_smi(tmp_path, "exec sleep 10")
    probe = NpuSmiProbe(executable=str(exe), timeout_s=0.3)
    for _ in range(2):
        start = time.monotonic()
        assert probe.sample() == []
        assert time.monotonic() - start < 2.0
    assert probe.pop_new_messages() == [
        f"'{exe} info' gave no answer within 0.3 s; NPU samples are null while it hangs"]
    assert probe.last_error and probe.enabled


def test_nonzero_exit_without_table(tmp_path):
    exe = fake_npu_smi(tmp_path, "echo 'dcmi module initialize failed. ret is -8005' >&2; exit 1")
    probe = NpuSmiProbe(executable=str(exe))
    assert probe.sample() == [] and probe.sample() == []
    assert probe.pop_new_messages() == [    # one problem: no second "no table" message
        f"'{exe} info' exited with status 1: dcmi module initialize failed. ret is -8005"]
    assert probe.pop_new_messages() == []


def test_nonzero_exit_with_table_still_samples(tmp_path, npu_smi_fixtures):
    exe = fake_npu_smi(tmp_path, f"cat {shlex.quote(str(npu_smi_fixtures / B1))}; exit 3")
    probe = NpuSmiProbe(executable=str(exe))
    assert probe.sample() == B1_SAMPLES
    assert probe.pop_new_messages() == [f"'{exe} info' exited with status 3",
                                        f"'{exe} info -m' exited with status 3"]


def test_garbage_output(tmp_path):
    exe = fake_npu_smi(tmp_path, "echo 'Segmentation fault (core dumped)'; echo '| x | y |'")
    probe = NpuSmiProbe(executable=str(exe))
    assert probe.sample() == [] and probe.sample() == []
    assert probe.pop_new_messages() == [f"'{exe} info' printed no NPU table "
                                        "(first line: 'Segmentation fault (core dumped)')"]
    assert calls(tmp_path) == ["info", "info"]  # no mapping asked for a tool that says nothing


@pytest.mark.parametrize("kind", ["absent", "not executable", "not on PATH", "not a program"])
def test_missing_executable_gives_up_with_one_message(tmp_path, monkeypatch, kind):
    exe = tmp_path / "npu-smi"
    if kind == "not executable":        # root too needs an x bit to exec a file
        exe.write_text("#!/bin/sh\n")
    if kind == "not a program":         # executable, but neither ELF nor script: ENOEXEC
        exe.write_bytes(b"\x00\x01garbage")
        exe.chmod(0o755)
    if kind == "not on PATH":
        monkeypatch.setenv("PATH", str(tmp_path / "empty"))
        exe = "npu-smi"
    probe = NpuSmiProbe(executable=str(exe))
    for _ in range(MAX_MISSING_TRIES):
        assert probe.enabled and probe.sample() == []
    assert not probe.enabled
    assert probe.disabled_reason == (f"{exe} could not be run {MAX_MISSING_TRIES} times "
                                     "in a row; NPU sampling is off")
    [message] = probe.pop_new_messages()
    error = {"absent": "FileNotFoundError", "not on PATH": "FileNotFoundError",
             "not executable": "PermissionError", "not a program": "OSError"}[kind]
    assert message.startswith(f"{exe} cannot be run ({error}: ")
    assert message.endswith(f"NPU sampling is off after {MAX_MISSING_TRIES} failures in a row")
    assert probe.sample() == [] and probe.pop_new_messages() == []


def test_gives_up_only_after_consecutive_misses(npu_smi_fixtures):
    text = (npu_smi_fixtures / B1).read_text()
    script = ["missing", "missing", "ok", "missing", "missing", "ok"]
    seen = []

    def runner(argv, **kwargs):
        seen.append(argv)
        assert kwargs == {"timeout": 2.0, "capture_output": True, "text": True}
        if argv[1:] == ["info", "-m"]:
            return SimpleNamespace(returncode=0, stdout="", stderr="")
        if script.pop(0) == "missing":
            raise FileNotFoundError(2, "No such file or directory")
        return subprocess.CompletedProcess(argv, 0, text, "")

    probe = NpuSmiProbe(runner=runner)
    results = [probe.sample() for _ in range(6)]
    nulls = [DeviceSample("npu", 0), DeviceSample("npu", 1)]     # known once seen
    assert results == [[], [], B1_SAMPLES, nulls, nulls, B1_SAMPLES] and probe.enabled
    assert len(probe.pop_new_messages()) == 1


@pytest.mark.parametrize("result", [RuntimeError("boom"), SimpleNamespace(),
                                    SimpleNamespace(returncode=None, stdout=b"x", stderr=7)])
def test_misbehaving_runner_never_raises(result):
    def runner(argv, **kwargs):
        if isinstance(result, Exception):
            raise result
        return result

    probe = NpuSmiProbe(runner=runner)
    assert probe.sample() == [] and probe.sample() == []
    assert len(probe.pop_new_messages()) >= 1 and probe.last_error


@pytest.mark.parametrize("env,expected", [
    ({}, None),
    ({"DEVICE_ID": "3"}, [3]),
    ({"LOCAL_RANK": "2"}, [2]),
    ({"MS_LOCAL_RANK": "1", "RANK_ID": "9"}, [1]),
    ({"DEVICE_ID": "3", "LOCAL_RANK": "1"}, [3]),
    ({"ASCEND_RT_VISIBLE_DEVICES": "4,5,6,7"}, [4, 5, 6, 7]),
    ({"ASCEND_RT_VISIBLE_DEVICES": "4, 5,6,7", "DEVICE_ID": "1"}, [5]),
    ({"ASCEND_RT_VISIBLE_DEVICES": "4,5,6,7", "LOCAL_RANK": "3"}, [7]),
    ({"ASCEND_RT_VISIBLE_DEVICES": "6", "DEVICE_ID": "6"}, [6]),
    ({"ASCEND_RT_VISIBLE_DEVICES": "6", "LOCAL_RANK": "2"}, [6]),
    ({"ASCEND_RT_VISIBLE_DEVICES": "4,5", "DEVICE_ID": "9"}, [4, 5]),
    ({"ASCEND_RT_VISIBLE_DEVICES": "all", "DEVICE_ID": "x", "LOCAL_RANK": "1"}, [1]),
    ({"ASCEND_RT_VISIBLE_DEVICES": "", "DEVICE_ID": " 0 "}, [0]),
])
def test_visible_devices_from_env(env, expected):
    assert visible_devices_from_env(env) == expected
