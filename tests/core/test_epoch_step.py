"""``epoch_step`` beside the global ``step``: the step's place in its epoch, as MindFormers'
MFLossMonitor prints it, in the step record, the anomaly report and the console line."""
import io
import json
import math
from pathlib import Path

import pytest

from mindwatch import Monitor
from mindwatch.records import Step, problems
from mindwatch.runlog import read_rank_log

PER_EPOCH = 4


def _monitor(tmp_path, clock, stream=None, **settings):
    return Monitor(str(tmp_path), clock=clock, stream=stream or io.StringIO(),
                   hardware_interval_s=None, **settings)


def test_the_step_record_carries_the_epoch_step_the_monitor_was_given(tmp_path, clock):
    monitor = _monitor(tmp_path, clock)
    for step in range(1, 2 * PER_EPOCH + 1):
        clock.advance(0.1)
        monitor.observe(step=step, epoch=(step - 1) // PER_EPOCH + 1, loss=1.0,
                        epoch_step=(step - 1) % PER_EPOCH + 1, steps_per_epoch=PER_EPOCH)
    monitor.observe(step=9, epoch=3, loss=1.0)            # a step whose place is unknown
    monitor.close()
    steps = read_rank_log(str(tmp_path / "rank_0.jsonl")).steps
    assert [(s["step"], s["epoch"], s["epoch_step"]) for s in steps[:PER_EPOCH + 2]] == [
        (1, 1, 1), (2, 1, 2), (3, 1, 3), (4, 1, 4), (5, 2, 1), (6, 2, 2)]
    assert all(s["steps_per_epoch"] == PER_EPOCH for s in steps[:-1])
    # unknown: null, never a made-up number, and no length
    assert steps[-1]["epoch_step"] is None and Step.STEPS_PER_EPOCH not in steps[-1]
    assert all(problems(s) == [] for s in steps)


@pytest.mark.parametrize("fields, match", [
    ({"epoch_step": 0}, "epoch_step must be a positive int"),
    ({"epoch_step": 2.0}, "epoch_step must be a positive int"),
    ({"epoch_step": True}, "epoch_step must be a positive int"),
    ({"steps_per_epoch": -1}, "steps_per_epoch must be a positive int"),
    ({"epoch_step": 5, "steps_per_epoch": 4}, "at most steps_per_epoch"),
    ({"extra": {"epoch_step": 3}}, "must not replace"),
])
def test_a_bad_epoch_step_is_refused_by_name(tmp_path, clock, fields, match):
    monitor = _monitor(tmp_path, clock)
    with pytest.raises(ValueError, match=match):
        monitor.observe(step=1, loss=1.0, **fields)
    monitor.close()


def test_the_anomaly_report_and_the_console_name_the_step_in_its_epoch(tmp_path, clock):
    console = io.StringIO()
    monitor = _monitor(tmp_path, clock, stream=console, on_anomaly="stop")
    for step, loss in [(25, 2.0), (26, math.nan)]:
        clock.advance(0.1)
        monitor.observe(step=step, epoch=2, loss=loss, lr=1e-3, epoch_step=step - 20,
                        steps_per_epoch=20)
    monitor.close()
    [anomaly] = read_rank_log(str(tmp_path / "rank_0.jsonl")).anomalies
    report = json.loads(Path(anomaly["report"]).read_text())
    assert (report["step"], report["epoch"], report["epoch_step"],
            report["steps_per_epoch"]) == (26, 2, 6, 20)
    assert [(r["step"], r["epoch"], r["epoch_step"]) for r in report["history"]] == [
        (25, 2, 5), (26, 2, 6)]
    markdown = Path(anomaly["report"][:-len(".json")] + ".md").read_text()
    assert markdown.startswith(
        "# Anomaly: loss_nonfinite at step 26 (epoch 2, step 6 of 20; rank 0)\n")
    assert "| step | epoch, step | loss |" in markdown and "| 26 | 2, 6 | nan |" in markdown
    assert "ANOMALY loss_nonfinite at step 26 (epoch 2 step 6): " in console.getvalue()


def test_without_an_epoch_step_the_report_reads_as_before(tmp_path, clock):
    console = io.StringIO()
    monitor = _monitor(tmp_path, clock, stream=console, on_anomaly="stop")
    monitor.observe(step=1, loss=2.0)
    monitor.observe(step=2, loss=math.nan)
    monitor.close()
    [anomaly] = read_rank_log(str(tmp_path / "rank_0.jsonl")).anomalies
    report = json.loads(Path(anomaly["report"]).read_text())
    assert report["epoch_step"] is None and report["epoch"] is None
    markdown = Path(anomaly["report"][:-len(".json")] + ".md").read_text()
    assert markdown.startswith("# Anomaly: loss_nonfinite at step 2 (rank 0)\n")
    assert "| step | loss | loss (smoothed) |" in markdown
    assert "ANOMALY loss_nonfinite at step 2: " in console.getvalue()
