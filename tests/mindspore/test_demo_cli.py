"""`mindwatch demo` end to end, as a user runs it: a real process, then `mindwatch summary`."""
import os
import subprocess
import sys

import pytest

from host_story import host_story
from mindwatch.runlog import read_rank_log

MINDWATCH = [sys.executable, "-m", "mindwatch.cli"]


def _demo(out, *args):
    return subprocess.run([*MINDWATCH, "demo", "--out", str(out), *args], capture_output=True,
                          text=True, timeout=300)


# make test's last worker runs it (tests/waits_scheduling.py): its throughput_drop, if any,
# must be the host's, as in test_host_contention_e2e.py
@pytest.mark.waits
def test_demo_trains_and_loss_falls(tmp_path):
    result = _demo(tmp_path / "run", "--steps", "120")
    assert result.returncode == 0, result.stderr
    assert "deprecated" not in result.stdout + result.stderr    # current MindSpore APIs only
    assert f"run directory: {tmp_path / 'run'}" in result.stdout
    report = tmp_path / "run" / "report.html"
    assert f"report: {report}" in result.stdout
    assert report.stat().st_size > 10_000 and "<svg" not in report.read_text()[:100]
    log = read_rank_log(str(tmp_path / "run" / "rank_0.jsonl"))
    steps = log.steps
    assert len(steps) == 120 and log.end["reason"] == "completed"
    assert steps[-1]["loss_smooth"] < 0.75 * steps[0]["loss"]
    assert all(s["grad_norm"] is not None and s["grad_norm"] > 0 for s in steps)
    # The demo's dataset rows are whole batches of 16 sequences: throughput counts sequences.
    assert all(s["samples_per_s"] == pytest.approx(16 / s["step_time_s"]) for s in steps)
    summary = subprocess.run([*MINDWATCH, "summary", str(tmp_path / "run")], capture_output=True,
                             text=True, timeout=60)
    # A test worker shares the CI host's two cores with another worker, which may be running
    # several training processes: the demo's step can then really take 2-3x longer for a while,
    # and throughput_drop says why: the host's other processes. Nothing else may be found.
    slowed = [a for a in log.anomalies if a["anomaly"] == "throughput_drop"]
    assert all(a["cause"] == "host" for a in slowed) and len(slowed) == len(log.anomalies), \
        host_story(log)
    if not log.anomalies:
        assert summary.returncode == 0 and "HEALTHY" in summary.stdout
    else:
        assert summary.returncode == 1 and "throughput_drop" in summary.stdout


# Nine steps: the demo's first state step is its tenth, whose graph compiles for 4 s; these
# rules need no warm-up
@pytest.mark.parametrize("fault, kind, stops", [
    ("explode@6", "gradient_explode", True),
    ("nan@5", "loss_nonfinite", True),
    ("vanish@4", "gradient_vanish", False),
])
def test_injected_faults_are_caught(tmp_path, fault, kind, stops):
    result = _demo(tmp_path / "run", "--steps", "9", "--inject", fault)
    assert result.returncode == 0, result.stderr
    log = read_rank_log(str(tmp_path / "run" / "rank_0.jsonl"))
    at = int(fault.split("@")[1])
    first = log.anomalies[0]
    assert first["anomaly"] == kind
    # vanishing must hold for grad_vanish_steps (3) steps before it is an alarm
    assert first["step"] == (at + 2 if kind == "gradient_vanish" else at)
    assert (log.end["reason"] == "stopped") is stops
    if stops:
        assert os.path.exists(first["checkpoint"]) and first["report"]
    summary = subprocess.run([*MINDWATCH, "summary", str(tmp_path / "run")], capture_output=True,
                             text=True, timeout=60)
    assert summary.returncode == 1


def test_bad_inject_is_one_line_exit_2(tmp_path):
    result = _demo(tmp_path / "run", "--inject", "melt@5")
    assert result.returncode == 2
    assert result.stderr.strip().count("\n") == 0 and "KIND@STEP" in result.stderr


def test_injected_divergence_is_withheld_once_its_update_is_too_large_for_the_weights(
        tmp_path):
    """diverge@50: the LR grows x1.5 a step. The jump rule never fires (each LR is 1.5x the
    peak the step before set), and before the update-size rule a rising loss was found later,
    its updates applied; now the step whose update would be larger than the weights' RMS is
    withheld and the run stops with the weights from before it."""
    result = _demo(tmp_path / "run", "--steps", "100", "--inject", "diverge@50")
    assert result.returncode == 0, result.stderr
    log = read_rank_log(str(tmp_path / "run" / "rank_0.jsonl"))
    assert not [a for a in log.anomalies if a["step"] < 50]     # quiet before the fault
    (stop,) = [a for a in log.anomalies if a["anomaly"] == "lr_anomaly"]
    assert 50 < stop["step"] <= 70 and "would move the weights by" in stop["message"]
    assert stop["value"] > stop["threshold"] and stop["actions"] == ["checkpoint", "stop"]
    assert log.steps[-1]["step"] == stop["step"] and log.steps[-1]["skipped"] is True
    assert log.end["reason"] == "stopped"


def test_an_injected_spike_under_skip_is_withheld_and_the_run_goes_on(tmp_path):
    result = _demo(tmp_path / "run", "--steps", "60", "--inject", "spike@40", "--policy", "skip")
    assert result.returncode == 0, result.stderr
    log = read_rank_log(str(tmp_path / "run" / "rank_0.jsonl"))
    assert log.run["config"]["policies"]["loss_spike"] == "skip"
    assert [s["step"] for s in log.steps if s["skipped"]] == [40]
    assert {a["anomaly"] for a in log.anomalies} >= {"loss_spike"}
    assert all(a["step"] == 40 and a["actions"] == ["skip"] for a in log.anomalies)
    assert log.end["reason"] == "completed" and len(log.steps) == 60
    assert log.steps[-1]["loss"] < 2 * log.steps[38]["loss"]      # back to where it was


def test_an_injected_spike_under_rewind_goes_back_and_the_run_goes_on(tmp_path):
    result = _demo(tmp_path / "run", "--steps", "60", "--inject", "spike@50", "--policy",
                   "rewind")
    assert result.returncode == 0, result.stderr
    assert "REWIND at step 50 (loss_spike): training state of step 40 restored" in result.stdout
    log = read_rank_log(str(tmp_path / "run" / "rank_0.jsonl"))
    assert [(r["step"], r["to_step"]) for r in log.of_kind("rewind")] == [(50, 40)]
    spikes = [a for a in log.anomalies if a["anomaly"] == "loss_spike"]
    assert [(a["step"], a["actions"]) for a in spikes] == [(50, ["rewind"])]
    assert log.end["reason"] == "completed" and len(log.steps) == 60
    assert log.steps[-1]["loss"] < 1.5 * log.steps[38]["loss"]    # back to where it was


def test_bad_policy_is_one_line_exit_2(tmp_path):
    result = _demo(tmp_path / "run", "--policy", "undo")
    assert result.returncode == 2
    assert result.stderr.strip().count("\n") == 0 and "--policy must be one of" in result.stderr
    assert not (tmp_path / "run").exists()
