"""tokens_per_s and MFU: computed from this rank's samples/s, in sink mode too, and shown by
the console, the dashboards and the summary (the report: tests/report/test_throughput_panels)."""
import io
import json
import urllib.request

import pytest

from mindwatch import Monitor
from mindwatch.cli import main
from mindwatch.runlog import read_rank_log
from mindwatch.sinks.scalars import ScalarView

# 8 samples of 128 tokens every 0.25 s: 32 samples/s, 4096 tokens/s; at 6e6 FLOP a token on
# a device of 0.1 TFLOP/s: 4096 * 6e6 / 1e11 = 0.24576 of its peak.
BATCH, TOKENS, FLOPS, PEAK, STEP_S = 8, 128, 6e6, 0.1, 0.25
FIGURES = {"tokens_per_sample": TOKENS, "flops_per_token": FLOPS, "peak_tflops": PEAK}


def _steps(tmp_path):
    return read_rank_log(str(tmp_path / "rank_0.jsonl")).steps


def _train(tmp_path, clock, step_times=(STEP_S,) * 3, stream=None, **settings):
    monitor = Monitor(str(tmp_path), clock=clock, stream=stream or io.StringIO(),
                      hardware_interval_s=None, batch_size=BATCH, **settings)
    for step, seconds in enumerate(step_times, start=1):
        clock.advance(seconds)
        monitor.observe(step=step, loss=1.0, grad_norm=1.0)
    monitor.close()
    return _steps(tmp_path)


def test_step_records_carry_tokens_per_s_and_mfu(tmp_path, clock):
    steps = _train(tmp_path, clock, **FIGURES)
    for record in steps:
        assert record["samples_per_s"] == 32.0
        assert record["tokens_per_s"] == 4096.0
        assert record["mfu"] == pytest.approx(0.24576, rel=1e-12)


def test_sink_mode_divides_by_the_steps_covered(tmp_path, clock):
    monitor = Monitor(str(tmp_path), clock=clock, stream=io.StringIO(), hardware_interval_s=None,
                      **FIGURES)
    for end in (4, 8):                     # 4 steps of 0.25 s in each observation
        clock.advance(4 * STEP_S)
        monitor.observe(step=end, steps=4, batch_size=BATCH, loss=1.0, grad_norm=1.0)
    monitor.close()
    steps = _steps(tmp_path)
    assert [s["steps_covered"] for s in steps] == [4, 4]
    assert [s["step_time_s"] for s in steps] == [STEP_S, STEP_S]
    assert [s["tokens_per_s"] for s in steps] == [4096.0, 4096.0]
    assert [s["mfu"] for s in steps] == pytest.approx([0.24576] * 2, rel=1e-12)


@pytest.mark.parametrize("settings, present", [
    ({}, set()),
    ({"tokens_per_sample": TOKENS}, {"tokens_per_s"}),
    ({"tokens_per_sample": TOKENS, "peak_tflops": PEAK}, {"tokens_per_s"}),
    (FIGURES, {"tokens_per_s", "mfu"})])
def test_figures_are_absent_unless_their_inputs_are_known(tmp_path, clock, settings, present):
    steps = _train(tmp_path, clock, **settings)
    assert {name for name in ("tokens_per_s", "mfu") if name in steps[0]} == present


def test_no_batch_size_no_figures(tmp_path, clock):
    monitor = Monitor(str(tmp_path), clock=clock, stream=io.StringIO(), hardware_interval_s=None,
                      **FIGURES)
    clock.advance(STEP_S)
    monitor.observe(step=1, loss=1.0)
    monitor.close()
    record = _steps(tmp_path)[0]
    assert record["samples_per_s"] is None
    assert "tokens_per_s" not in record and "mfu" not in record


@pytest.mark.parametrize("settings, error, match", [
    ({"peak_tflops": 300.0}, ValueError, "peak_tflops needs tokens_per_sample"),
    ({"flops_per_token": 6e9}, ValueError, "flops_per_token needs tokens_per_sample"),
    ({"tokens_per_sample": 0}, ValueError, "tokens_per_sample must be >= 1"),
    ({"tokens_per_sample": 2048.0}, TypeError, "tokens_per_sample must be an int"),
    ({"tokens_per_sample": True}, TypeError, "tokens_per_sample must be an int"),
    ({"tokens_per_sample": 8, "flops_per_token": 0}, ValueError, "flops_per_token must be > 0"),
    ({"tokens_per_sample": 8, "peak_tflops": -1.0}, ValueError, "peak_tflops must be > 0"),
    ({"tokens_per_sample": 8, "peak_tflops": float("inf")}, ValueError,
     "peak_tflops must be finite"),
    ({"tokens_per_sample": 8, "peak_tflops": "312"}, TypeError, "peak_tflops must be a number")])
def test_bad_settings_name_what_is_wrong(tmp_path, settings, error, match):
    with pytest.raises(error, match=match):
        Monitor(str(tmp_path), **settings)


def test_console_line_shows_tokens_and_mfu(tmp_path, clock):
    stream = io.StringIO()
    _train(tmp_path, clock, stream=stream, print_interval=1, **FIGURES)
    lines = [line for line in stream.getvalue().splitlines() if "step" in line and "loss" in line]
    assert lines and all(line.endswith("32.0 samples/s | 4.1k tok/s MFU 24.6%") for line in lines)


def test_dashboards_get_the_figures(tmp_path, clock):
    record = _train(tmp_path, clock, **FIGURES)[0]
    scalars = dict(ScalarView().point(record).scalars)
    assert scalars["time/tokens_per_s"] == 4096.0
    assert scalars["time/mfu"] == pytest.approx(0.24576, rel=1e-12)
    pytest.importorskip("prometheus_client")
    from mindwatch.sinks.prometheus import PrometheusSink
    sink = PrometheusSink(0)
    try:
        sink.write(record)
        with urllib.request.urlopen(sink.url, timeout=5) as response:
            text = response.read().decode()
    finally:
        sink.close()
    assert 'mindwatch_tokens_per_second{rank="0"} 4096.0' in text
    assert 'mindwatch_mfu_ratio{rank="0"} 0.24576' in text


def test_summary_quotes_the_median_tokens_per_s_and_mfu(tmp_path, clock, capsys):
    # 32, 16, 32, 64 samples/s: the median is 32 (4096 tokens/s), not the mean
    _train(tmp_path, clock, step_times=(0.25, 0.5, 0.25, 0.125), **FIGURES)
    assert main(["summary", str(tmp_path), "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["ranks"][0]["tokens_per_s"] == 4096.0
    assert result["ranks"][0]["mfu"] == pytest.approx(0.24576, rel=1e-12)
    assert result["throughput"]["tokens_per_s"] == 4096.0
    assert main(["summary", str(tmp_path)]) == 0
    assert "; median 4.1k tok/s, MFU 24.6%" in capsys.readouterr().out


def test_summary_without_tokens_says_nothing_of_them(tmp_path, clock, capsys):
    _train(tmp_path, clock)
    assert main(["summary", str(tmp_path), "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["throughput"] is None and result["ranks"][0]["tokens_per_s"] is None

