"""The Prometheus sink, scraped over loopback like Prometheus would."""
import math
import socket
import urllib.error
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from mindwatch.anomaly import ANOMALY_KINDS
from mindwatch.sinks.prometheus import PrometheusSink


def scrape(port):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        assert response.status == 200
        text = response.read().decode("utf-8")
    samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples


def value(samples, name, **labels):
    return samples[(name, tuple(sorted(labels.items())))]


@pytest.fixture
def sink():
    sink = PrometheusSink(0, rank=2)
    yield sink
    sink.close()


def test_gauges_and_counters_over_http(sink, run_records):
    assert sink.port > 0
    for record in run_records:
        sink.write(record)
    s = scrape(sink.port)
    rank = {"rank": "2"}
    # The latest step (3) and the latest hardware sample win.
    assert value(s, "mindwatch_loss", **rank) == 2.25
    assert value(s, "mindwatch_loss_smooth", **rank) == 2.475
    assert value(s, "mindwatch_lr", **rank) == 9e-4
    assert value(s, "mindwatch_grad_norm", **rank) == 150.0
    assert value(s, "mindwatch_step", **rank) == 3
    assert value(s, "mindwatch_epoch", **rank) == 1
    assert value(s, "mindwatch_step_time_seconds", **rank) == 0.025
    assert value(s, "mindwatch_samples_per_second", **rank) == 640.0
    assert value(s, "mindwatch_cpu_percent", **rank) == 20.0
    assert value(s, "mindwatch_memory_used_gigabytes", **rank) == 7.5
    assert value(s, "mindwatch_process_resident_memory_gigabytes", **rank) == 1.75
    npu0, npu1 = {"rank": "2", "device": "npu0"}, {"rank": "2", "device": "npu1"}
    assert math.isnan(value(s, "mindwatch_device_util_percent", **npu0))  # known, then null
    assert value(s, "mindwatch_device_util_percent", **npu1) == 80.0
    assert value(s, "mindwatch_device_mem_used_megabytes", **npu0) == 1100.0
    assert value(s, "mindwatch_device_temperature_celsius", **npu0) == 46.0
    assert value(s, "mindwatch_device_temperature_celsius", **npu1) == 50.0
    assert value(s, "mindwatch_device_power_watts", **npu0) == -math.inf
    assert value(s, "mindwatch_device_power_watts", **npu1) == 95.0
    for kind in ANOMALY_KINDS:
        want = 1.0 if kind in ("loss_nonfinite", "gradient_explode") else 0.0
        assert value(s, "mindwatch_anomalies_total", rank="2", kind=kind) == want, kind


def test_unknown_values_make_no_series_and_nonfinite_values_pass(sink, run_records):
    sink.write(run_records[1])                      # step 1: grad_norm is null
    s = scrape(sink.port)
    names = {name for name, _ in s}
    assert "mindwatch_grad_norm" not in names       # never known: no made-up number
    assert "mindwatch_device_util_percent" not in names
    sink.write(run_records[3])                      # step 2: loss NaN, grad_norm inf
    s = scrape(sink.port)
    assert math.isnan(value(s, "mindwatch_loss", rank="2"))
    assert value(s, "mindwatch_grad_norm", rank="2") == math.inf
    assert math.isnan(value(s, "mindwatch_samples_per_second", rank="2"))  # 16.0, then null


def test_several_sinks_in_one_process_and_close_frees_the_port():
    first, second = PrometheusSink(0, rank=0), PrometheusSink(0, rank=1)
    assert first.port != second.port
    first.write({"kind": "step", "rank": 0, "time": 0.0, "step": 5, "loss": 1.0})
    second.write({"kind": "step", "rank": 1, "time": 0.0, "step": 7, "loss": 2.0})
    assert value(scrape(first.port), "mindwatch_step", rank="0") == 5
    assert value(scrape(second.port), "mindwatch_step", rank="1") == 7
    port = first.port
    first.close()
    first.close()                                   # idempotent
    second.close()
    with pytest.raises(urllib.error.URLError):
        scrape(port)
    # Nothing listens any more: a new server can bind the same port.
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        probe.bind(("127.0.0.1", port))
        probe.listen()


def test_busy_port_fails_at_construction():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        with pytest.raises(OSError, match=r"cannot listen on 127\.0\.0\.1"):
            PrometheusSink(taken.getsockname()[1])


def test_missing_package_fails_loudly(hide_package):
    hide_package("prometheus_client")
    with pytest.raises(ImportError, match="pip install prometheus-client"):
        PrometheusSink(0)
