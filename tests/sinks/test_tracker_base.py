"""What every tracker receives (trackers/base.py), through a tracker that keeps its calls: the
run log's records as one tracker run per segment, metrics at the run log's steps, hardware
less what the tracker charts itself, each anomaly as an event after the steps before it, and
an end whose outcome, verdict and files are the run's (the real trackers: tests/trackers)."""
import io
import json
import math
from pathlib import Path

import pytest

import mindwatch.monitor
from mindwatch import Monitor
from mindwatch.observation import DeviceSample, HardwareSample
from mindwatch.report.summary import summarize_dir
from mindwatch.settings import MonitorSettings
from mindwatch.sinks.factory import open_sinks
from mindwatch.trackers.base import TrackerSink


class Kept(TrackerSink):
    HARDWARE_CHARTS = frozenset({"host", "gpu"})

    def __init__(self, log_dir, calls):
        super().__init__({}, log_dir=log_dir, rank=0, thread_name="kept")
        self.calls = calls

    @property
    def name(self):
        return "Kept"

    def start(self, record):
        self.calls.append(("start", record["config"]["report_to"]))

    def log(self, step, metrics, wall_time):
        self.calls.append(("log", step, dict(metrics)))

    def event(self, record):
        self.calls.append(("event", record["step"], record["anomaly"]))

    def end(self, run_end):
        self.calls.append(("end", run_end))


@pytest.fixture
def kept(monkeypatch):
    """report_to="mlflow" opens a Kept tracker instead: the calls it was given."""
    calls = []
    monkeypatch.setattr(mindwatch.monitor, "open_tracker",
                        lambda name, options, log_dir, rank: Kept(log_dir, calls))
    return calls


def _monitor(log_dir, **settings):
    return Monitor(str(log_dir), stream=io.StringIO(), hardware_interval_s=None,
                   report_to="mlflow", **settings)


def test_a_stopped_segment_then_a_resumed_one(tmp_path, clock, kept):
    calls = kept
    monitor = _monitor(tmp_path, on_anomaly={"loss_nonfinite": "stop"}, clock=clock)
    monitor.observe(step=1, loss=1.0, lr=0.1, grad_norm=2.0)
    monitor.submit_hardware(HardwareSample(time=clock.time(), cpu_percent=5.0, devices=[
        DeviceSample("gpu", 0, temp_c=60.0), DeviceSample("npu", 1, temp_c=50.0)]))
    monitor.observe(step=2, loss=float("nan"), lr=0.1)
    monitor.close()
    logs = [c for c in calls if c[0] == "log"]
    assert calls[0] == ("start", {"mlflow": {}})
    assert logs[0] == ("log", 1, {"loss": 1.0, "loss_smooth": 1.0, "lr": 0.1, "grad_norm": 2.0,
                                  "skipped": 0.0, **{k: v for k, v in logs[0][2].items()
                                                     if k.endswith(("_s", "_per_s"))}})
    hardware = [c[2] for c in logs if any(k.startswith("hardware/") for k in c[2])]
    # the host and the GPU are the tracker's own charts; the NPU is not
    assert hardware == [{"hardware/npu1/temp_c": 50.0}]
    # the anomaly: its running count at its step, then the event
    at = calls.index(("event", 2, "loss_nonfinite"))
    assert calls[at - 1] == ("log", 2, {"anomalies/loss_nonfinite": 1.0})
    assert calls[at - 2][:2] == ("log", 2) and math.isnan(calls[at - 2][2]["loss"])
    (_, end), = [c for c in calls if c[0] == "end"]
    assert (end.reason, end.outcome) == ("stopped", "killed")
    assert end.verdict == summarize_dir(str(tmp_path))["verdict"] == "1 ANOMALY"
    assert len(end.anomalies) == 1 and '"loss": "nan"' not in end.anomalies[0]
    assert end.reports_dir is not None and "<html" in Path(end.report).read_text().lower()

    calls.clear()                                   # a second segment: a run of its own
    monitor = _monitor(tmp_path, resume=True, clock=clock)
    monitor.observe(step=2, loss=0.9, lr=0.1)
    monitor.close()
    assert calls[0][0] == "start" and calls[-1][0] == "end"
    assert (calls[-1][1].reason, calls[-1][1].outcome) == ("completed", "finished")
    assert calls[-1][1].anomalies == []


def test_a_run_without_an_end_record_ends_failed(tmp_path):
    calls = []
    sink = Kept(str(tmp_path), calls)
    sink.write({"kind": "run", "config": {"report_to": None}})
    sink.write({"kind": "step", "step": 1, "loss": 2.0, "time": 1.0})
    sink.close()
    (_, end), = [c for c in calls if c[0] == "end"]
    assert (end.reason, end.outcome, end.verdict) == (None, "failed", "NO END RECORD")
    assert calls[1] == ("log", 1, {"loss": 2.0, "skipped": 0.0})


class EndFails(Kept):
    def end(self, run_end):
        raise ConnectionError("the server went away")


def test_an_end_the_tracker_could_not_complete_is_said_in_the_run_log(tmp_path, monkeypatch):
    """The tracker's end runs before the run log closes: its failure is a notice there."""
    monkeypatch.setattr(mindwatch.monitor, "open_tracker",
                        lambda name, options, log_dir, rank: EndFails(log_dir, []))
    monitor = _monitor(tmp_path)
    monitor.observe(step=1, loss=1.0)
    monitor.close()
    lines = [json.loads(line) for line in (tmp_path / "rank_0.jsonl").read_text().splitlines()]
    said = [r["message"] for r in lines if r["kind"] == "notice"]
    assert len(said) == 1 and "Kept did not take" in said[0] and "went away" in said[0], said
    assert lines[-1]["kind"] == "notice" and lines[-2]["kind"] == "end"


@pytest.mark.parametrize(("options", "ranks"), [({}, [0]), ({"all_ranks": True}, [0, 1])])
def test_rank_0_reports_unless_every_rank_is_asked_for(tmp_path, options, ranks):
    opened = []

    def open_tracker(name, options, log_dir, rank):
        opened.append(rank)
        return Kept(log_dir, [])
    settings = MonitorSettings(report_to={"mlflow": options})
    for rank in (0, 1):
        sinks = open_sinks(settings, log_dir=str(tmp_path), log_path=str(tmp_path / f"{rank}"),
                           rank=rank, local_rank=rank, console=Kept(str(tmp_path), []),
                           framework_sinks={}, open_tracker=open_tracker)
        for sink in sinks:
            sink.close()
    assert opened == ranks
    assert Kept(str(tmp_path), []).run_name == tmp_path.name
