"""What every tracker must hold of a run, checked against the run log it was fed from: each
step's loss (and the withheld steps marked), the settings, the end and the verdict as
``mindwatch summary`` says them, the anomalies, the HTML report and the anomaly reports."""
from __future__ import annotations

import io
import json
import math
from pathlib import Path

from tracked import TrackedRun

from mindwatch.report.summary import summarize_dir


def step_records(log_dir: Path) -> list[dict]:
    lines = (Path(log_dir) / "rank_0.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines if '"kind":"step"' in line]


def check_against_log(run: TrackedRun, log_dir: Path, *, status: str, anomaly: str | None,
                      setting: tuple[str, str] | None = None) -> None:
    steps = step_records(log_dir)
    finite = [(s["step"], s["loss"]) for s in steps
              if isinstance(s["loss"], (int, float)) and math.isfinite(s["loss"])]
    assert finite, "the run log has no finite loss"
    assert [(step, value) for step, value in run.metrics["loss"]
            if math.isfinite(value)] == finite
    assert {step for step, value in run.metrics["skipped"] if value == 1.0} == \
        {s["step"] for s in steps if s["skipped"]}
    assert run.verdict == summarize_dir(str(log_dir))["verdict"]
    assert run.status == status
    end = [json.loads(line) for line in (Path(log_dir) / "rank_0.jsonl").read_text()
           .splitlines() if '"kind":"end"' in line][-1]
    assert run.end_reason == end["reason"]
    if anomaly is None:
        assert not run.events, run.events
    else:
        assert any(anomaly in event for event in run.events), run.events
        reports = sorted(p.name for p in (Path(log_dir) / "anomalies").iterdir())
        assert reports and all(any(name.endswith(report) for name in run.files)
                               for report in reports), (reports, sorted(run.files))
    assert b"<html" in run.files["report.html"].lower()
    if setting is not None:
        name, value = setting              # the setting's value, as the tracker shows it
        assert value in run.config[name], run.config.get(name)


def stopped_run(log_dir: Path, report_to: dict) -> None:
    """A monitor's run a NaN loss stops at step 5, with a state record at step 2 (as
    ``wrap``'s state records bring it), feeding ``report_to``."""
    from mindwatch import Monitor

    monitor = Monitor(str(log_dir), stream=io.StringIO(), hardware_interval_s=None,
                      report_to=report_to, on_anomaly={"loss_nonfinite": "stop"})
    for step, loss in enumerate([1.0, 0.9, 0.8, 0.7, float("nan")], start=1):
        found = monitor.observe(step=step, loss=loss, lr=0.01, grad_norm=1.0)
        if step == 2:
            monitor.observe_state(step=2, weight_norm=3.0, update_norm=0.03, layers={
                "dense.weight": {"weight_norm": 3.0, "update_norm": 0.03,
                                 "update_ratio": 0.01, "grad_norm": 0.5}})
        if any(a.stops for a in found):
            break
    monitor.close()
