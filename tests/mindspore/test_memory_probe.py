"""The MindSpore memory reader: real on this CPU machine, and through stand-ins."""
import threading
from types import SimpleNamespace

from mindwatch.hardware.framework_memory import FrameworkMemoryProbe
from mindwatch.mindspore.hardware.memory import mindspore_memory_reader

KEYS = {"device_target", "allocated_mb", "reserved_mb", "max_allocated_mb", "max_reserved_mb"}


def test_cpu_reports_no_pool_numbers_and_does_not_raise():
    read = mindspore_memory_reader()
    got = []
    # read from another thread, as the sampler does
    thread = threading.Thread(target=lambda: got.append(read()))
    thread.start()
    thread.join()
    assert got == [{"device_target": "CPU", "allocated_mb": None, "reserved_mb": None,
                    "max_allocated_mb": None, "max_reserved_mb": None}]
    probe = FrameworkMemoryProbe(read, name="MindSpore")
    assert probe.sample() == got[0] and probe.pop_new_messages() == []


def fake_ms(target, runtime):
    return SimpleNamespace(get_context=lambda key: {"device_target": target}[key], runtime=runtime)


def test_device_backend_in_mb_from_one_stats_call():
    stats = {"total_allocated_memory": 3 * 2 ** 20, "total_reserved_memory": 2 ** 30,
             "max_allocated_memory": 5 * 2 ** 19, "max_reserved_memory": 2 ** 31}
    read = mindspore_memory_reader(fake_ms("Ascend", SimpleNamespace(memory_stats=lambda: stats)))
    assert read() == {"device_target": "Ascend", "allocated_mb": 3.0, "reserved_mb": 1024.0,
                      "max_allocated_mb": 2.5, "max_reserved_mb": 2048.0}


def test_single_functions_when_memory_stats_is_missing():
    def broken():
        raise RuntimeError("device lost")

    runtime = SimpleNamespace(memory_allocated=lambda: 2 ** 21, memory_reserved=broken,
                              max_memory_allocated=lambda: "?")
    assert mindspore_memory_reader(fake_ms("GPU", runtime))() == {
        "device_target": "GPU", "allocated_mb": 2.0, "reserved_mb": None,
        "max_allocated_mb": None, "max_reserved_mb": None}


def test_never_raises():
    def boom(key):
        raise RuntimeError("context gone")

    read = mindspore_memory_reader(SimpleNamespace(get_context=boom))
    assert read() == dict.fromkeys(KEYS)


def test_framework_probe_reports_a_failing_reader_once():
    def reader():
        raise RuntimeError("allocator busy")

    probe = FrameworkMemoryProbe(reader, name="MindSpore")
    assert probe.sample() is None and probe.sample() is None
    assert probe.pop_new_messages() == [
        "MindSpore memory reader failed (RuntimeError: allocator busy); "
        "framework memory is null while it fails"]
    assert probe.pop_new_messages() == []
    cleaned = FrameworkMemoryProbe(lambda: {"a": 1, "b": float("inf"), "c": "x", "d": [1]})
    assert cleaned.sample() == {"a": 1.0, "b": None, "c": "x", "d": None}
