import io
import math

import pytest

from mindwatch import Monitor
from mindwatch.runlog import read_rank_log


def _monitor(tmp_path, clock, **settings):
    settings.setdefault("hardware_interval_s", None)    # exact record sequences below
    return Monitor(str(tmp_path), clock=clock, stream=io.StringIO(), **settings)


def test_custom_loop_writes_contract_records(tmp_path, clock):
    monitor = _monitor(tmp_path, clock, loss_smoothing=0.5, batch_size=8)
    losses = [4.0, 2.0, 3.0, 1.0]
    for step, loss in enumerate(losses, start=1):
        clock.advance(0.25)
        assert monitor.observe(step=step, epoch=1 if step <= 2 else 2, loss=loss, lr=0.1,
                               grad_norm=1.5) == []
    monitor.close()
    log = read_rank_log(str(tmp_path / "rank_0.jsonl"))
    kinds = [r["kind"] for r in log.records]
    assert kinds == ["run", "step", "step", "epoch", "step", "step", "epoch", "end"]
    run = log.records[0]
    assert run["schema"] == 1 and run["world_size"] == 1 and run["config"]["loss_smoothing"] == 0.5
    assert set(run["versions"]) == {"mindwatch", "mindspore", "python"}
    steps = log.steps
    assert [s["loss_smooth"] for s in steps] == [4.0, 3.0, 3.0, 2.0]
    assert all(s["step_time_s"] == pytest.approx(0.25) for s in steps)
    assert all(s["samples_per_s"] == pytest.approx(32.0) for s in steps)
    assert [s["time"] for s in steps] == [clock.now - 0.75, clock.now - 0.5, clock.now - 0.25,
                                          clock.now]
    epochs = log.of_kind("epoch")
    assert [(e["epoch"], e["loss_mean"], e["steps"]) for e in epochs] == [(1, 3.0, 2), (2, 2.0, 2)]
    assert epochs[0]["converging"] is None and epochs[1]["converging"] is True
    end = log.end
    assert end["reason"] == "completed" and end["steps"] == 4
    assert end["elapsed_s"] == pytest.approx(1.0)


def test_nonfinite_loss_is_reported_and_kept_out_of_the_smoothing(tmp_path, clock):
    monitor = _monitor(tmp_path, clock, loss_smoothing=0.5)
    monitor.observe(step=1, loss=2.0)
    found = monitor.observe(step=2, loss=math.nan)
    assert [a.kind for a in found] == ["loss_nonfinite"]
    assert found[0].actions == ["checkpoint", "stop"]
    assert monitor.stop_requested is found[0]
    monitor.observe(step=3, loss=4.0)
    monitor.close()
    log = read_rank_log(str(tmp_path / "rank_0.jsonl"))
    assert [s["loss_smooth"] for s in log.steps] == [2.0, 2.0, 3.0]
    assert math.isnan(log.steps[1]["loss"])
    assert log.end["reason"] == "stopped"
    anomaly = log.anomalies[0]
    assert anomaly["anomaly"] == "loss_nonfinite" and anomaly["step"] == 2
    assert anomaly["checkpoint"] is None            # no framework: nothing to save
    assert anomaly["report"].endswith("anomalies/step2_rank0.json")
    report = (tmp_path / "anomalies" / "step2_rank0.md").read_text()
    assert "loss_nonfinite at step 2" in report and "no checkpoint was written" in report


def test_gradient_bounds(tmp_path, clock):
    monitor = _monitor(tmp_path, clock, grad_vanish_steps=2, on_anomaly="warn")
    kinds = []
    for step, norm in enumerate([1.0, 150.0, 1e-8, 1e-8, 1e-8, 1.0, math.inf], start=1):
        kinds.append([a.kind for a in monitor.observe(step=step, loss=1.0, grad_norm=norm)])
    assert kinds == [[], ["gradient_explode"], [], ["gradient_vanish"], [], [],
                     ["gradient_nonfinite"]]
    assert monitor.stop_requested is None           # every policy is warn


def test_existing_run_log_is_refused_and_resume_appends(tmp_path, clock):
    first = _monitor(tmp_path, clock)
    first.observe(step=1, loss=1.0)
    first.close()
    with pytest.raises(ValueError, match="resume=True"):
        _monitor(tmp_path, clock)
    second = _monitor(tmp_path, clock, resume=True)
    second.observe(step=2, loss=0.5)
    second.close()
    log = read_rank_log(str(tmp_path / "rank_0.jsonl"))
    # the resumed segment says what it took back from the log (test_resumed_history.py)
    assert [r["kind"] for r in log.records] == ["run", "step", "end", "run", "notice", "step",
                                                "end"]
    assert log.of_kind("notice")[0]["message"].startswith("resumed after step 1: the history")
    assert [s["step"] for s in log.steps] == [1, 2]


def test_close_is_idempotent_and_records_errors(tmp_path, clock):
    monitor = _monitor(tmp_path, clock)
    monitor.observe(step=1, loss=1.0)
    monitor.close(error="RuntimeError: boom")
    monitor.close()
    log = read_rank_log(str(tmp_path / "rank_0.jsonl"))
    assert log.end["reason"] == "error" and log.end["error"] == "RuntimeError: boom"
    assert sum(r["kind"] == "end" for r in log.records) == 1


@pytest.mark.parametrize("kwargs, match", [
    ({"step": 0, "loss": 1.0}, "step must be a positive int"),
    ({"step": 1.0, "loss": 1.0}, "step must be a positive int"),
    ({"step": 1, "loss": "low"}, "loss must be a number"),
    ({"step": 1, "loss": 1.0, "steps": 0}, "steps must be a positive int"),
])
def test_observe_rejects_bad_input(tmp_path, clock, kwargs, match):
    monitor = _monitor(tmp_path, clock)
    with pytest.raises((TypeError, ValueError), match=match):
        monitor.observe(**kwargs)


def test_start_after_close_appends_a_segment(tmp_path, clock):
    monitor = _monitor(tmp_path, clock)
    monitor.observe(step=1, loss=float("nan"))
    monitor.close()
    with pytest.raises(RuntimeError, match="call start"):
        monitor.observe(step=2, loss=1.0)
    monitor.start()
    assert monitor.stop_requested is None
    monitor.observe(step=2, loss=1.0)
    monitor.close()
    log = read_rank_log(str(tmp_path / "rank_0.jsonl"))
    assert [r["kind"] for r in log.records] == ["run", "step", "anomaly", "end", "run", "step",
                                                "end"]
    assert [r["reason"] for r in log.of_kind("end")] == ["stopped", "completed"]


def test_hardware_findings_act_on_the_training_thread(tmp_path, clock):
    from mindwatch.observation import DeviceSample, HardwareSample
    monitor = _monitor(tmp_path, clock, overheat_samples=2, max_temperature_c=80.0)
    monitor.observe(step=1, loss=1.0)
    for temperature in (79.0, 81.0, 82.0):
        monitor.submit_hardware(HardwareSample(time=clock.time(), cpu_percent=5.0, devices=[
            DeviceSample("npu", 0, temp_c=temperature)]))
    assert monitor.stop_requested is None          # nothing acts from the sampler thread
    found = monitor.observe(step=2, loss=1.0)
    assert [(a.kind, a.step, a.value) for a in found] == [("overheat", 2, 82.0)]
    assert monitor.stop_requested is found[0] and found[0].actions == ["checkpoint", "stop"]
    monitor.close()
    log = read_rank_log(str(tmp_path / "rank_0.jsonl"))
    assert [r["kind"] for r in log.records] == ["run", "step", "hardware", "hardware",
                                                "hardware", "step", "anomaly", "end"]
    assert log.of_kind("hardware")[2]["devices"][0]["temp_c"] == 82.0
    report = (tmp_path / "anomalies" / "step2_rank0.md").read_text()
    assert "Latest hardware sample" in report and '"temp_c": 82.0' in report


def test_sampler_runs_between_start_and_close(tmp_path, clock):
    import time
    monitor = Monitor(str(tmp_path), clock=clock, stream=io.StringIO(), hardware_interval_s=0.05)
    monitor.start()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and len(_hardware(tmp_path)) < 3:
        time.sleep(0.02)
    monitor.close()
    count = len(_hardware(tmp_path))
    assert count >= 3
    time.sleep(0.2)
    assert len(_hardware(tmp_path)) == count           # stopped with the run
    sample = _hardware(tmp_path)[0]
    assert sample["rss_gb"] > 0 and sample["mem_used_gb"] > 0


def _hardware(tmp_path):
    return read_rank_log(str(tmp_path / "rank_0.jsonl")).of_kind("hardware")
