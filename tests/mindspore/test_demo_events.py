"""One fault, one event: `mindwatch demo --inject explode@120` finds three anomalies at step
120 (gradient_explode, loss_spike, grad_spike). The run log keeps a record of each, the
replay's verdict in each; the console, `summary`, `watch` and the HTML report show one line
for the step, naming the three kinds, the checkpoint and the verdict once. Real processes
throughout, as a user runs them.

A test worker shares the CI host's cores with other training processes, so the demo may also
find a throughput_drop before the explosion whose cause is the host (as in test_demo_cli.py):
each view is checked for the explosion's one line, and for nothing else but such drops."""
import html
import json
import os
import re
import subprocess
import sys

import pytest

from host_story import host_story
from mindwatch.basics import format as fmt
from mindwatch.runlog import read_rank_log

MINDWATCH = [sys.executable, "-m", "mindwatch.cli"]
# One worker runs this module's tests: the module's one demo run (explosion) is then trained
# once, not once on each worker that took a test of it.
pytestmark = pytest.mark.xdist_group("demo_events")
KINDS = ["gradient_explode", "loss_spike", "grad_spike"]
VERDICT = ("computed again on the same batch and weights it came out bit-identical: the batch "
           "(step 120 of epoch 1) or the model's state is the cause, not the device")


@pytest.fixture(scope="module")
def explosion(tmp_path_factory):
    out = tmp_path_factory.mktemp("demo") / "run"
    result = subprocess.run([*MINDWATCH, "demo", "--out", str(out), "--inject", "explode@120"],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    log = read_rank_log(str(out / "rank_0.jsonl"))
    # the host's other work (make test's workers) may slow the demo before the explosion:
    # throughput drops, whatever their cause. Its cause is not this module's to judge: on a
    # baseline learned while the host was as busy, a drop that came as the load changed may
    # be the compute's (seen once: the host 99% busy throughout, the demo's share 50 -> 17%);
    # test_host_contention_e2e judges it with a load the test controls
    others = [a for a in log.anomalies if a["step"] != 120]
    assert all(a["anomaly"] == "throughput_drop" and a["step"] < 120 for a in others), \
        host_story(log)
    return out, result.stdout, log


def _at_120(log):
    return [a for a in log.anomalies if a["step"] == 120]


def _counts(log):
    """"N in all, M events": the explosion's three anomalies are one event; a drop is one."""
    count = len(log.anomalies)
    return f"{count} in all, {fmt.count(count - 2, 'event')}"


def _line_of_step_120(lines):
    found = [line for line in lines if "at step 120" in line]
    assert len(found) == 1, lines
    return found[0]


def test_the_run_log_keeps_one_record_per_kind_with_the_verdict(explosion):
    out, _, log = explosion
    at_120 = _at_120(log)
    assert [a["anomaly"] for a in at_120] == KINDS
    assert log.anomalies[-3:] == at_120                              # the last three records
    explode = at_120[0]
    assert explode["actions"] == ["checkpoint", "stop"] and os.path.exists(explode["checkpoint"])
    assert [a["actions"] for a in at_120[1:]] == [["warn"], ["warn"]]
    assert [a["replay_verdict"] for a in at_120] == [VERDICT] * 3
    assert all("computed again" not in a["message"] for a in at_120)
    # the anomaly's own report and its JSON still say what the replay found
    report = json.loads((out / "anomalies" / "step120_rank0.json").read_text())
    assert report["replay_verdict"] == VERDICT
    markdown = (out / "anomalies" / "step120_rank0.md").read_text()
    assert f"{explode['message']}; {VERDICT}" in markdown


def test_the_console_prints_one_line_for_the_step(explosion):
    _, stdout, log = explosion
    anomaly_lines = [line for line in stdout.splitlines() if "ANOMALY" in line]
    explode = _at_120(log)[0]
    assert anomaly_lines[-1] == (
        f"[rank 0] ANOMALY {', '.join(KINDS)} at step 120 (epoch 1 step 120): "
        f"{explode['message']}; {VERDICT} [checkpoint+stop -> {explode['checkpoint']}]")
    assert _line_of_step_120(anomaly_lines) == anomaly_lines[-1]
    assert all("ANOMALY throughput_drop at step " in line for line in anomaly_lines[:-1])
    assert len(anomaly_lines) == len(log.anomalies) - 2
    assert stdout.count("computed again") == 1


def test_summary_lists_one_event(explosion):
    out, _, log = explosion
    explode = _at_120(log)[0]
    result = subprocess.run([*MINDWATCH, "summary", str(out)], capture_output=True, text=True,
                            timeout=60)
    lines = result.stdout.splitlines()
    assert result.returncode == 1 and lines[0].endswith(f"{len(log.anomalies)} ANOMALIES")
    line = _line_of_step_120(lines)
    # the event is the last line before the bad batch it came with, then the run's goodput
    assert lines[-1].startswith("  goodput ")
    assert lines[-3].startswith("  bad batches (bad_batches.jsonl): 1 batch; ")
    assert lines[-2].startswith("    step 120 (epoch 1): grad_spike, gradient_explode, "
                                "loss_spike, batch ") and lines[-2].endswith(
        "(failed again on replay)")
    assert line == lines[-4] and line.strip() == (
        f"{', '.join(KINDS)} at step 120: {explode['message']}; {VERDICT} "
        f"[checkpoint+stop -> {explode['checkpoint']}]")
    assert len([line for line in lines if " at step " in line]) == len(log.anomalies) - 2
    assert result.stdout.count("computed again") == 1
    as_json = json.loads(subprocess.run([*MINDWATCH, "summary", "--json", str(out)],
                                        capture_output=True, text=True, timeout=60).stdout)
    [rank] = as_json["ranks"]
    # per record, as before; and the events beside them
    assert [a["anomaly"] for a in rank["anomalies"]] == [a["anomaly"] for a in log.anomalies]
    event = rank["events"][-1]
    assert (event["step"], event["kinds"], event["actions"], event["replay_verdict"]) == (
        120, KINDS, ["checkpoint", "stop"], VERDICT)
    assert len(rank["events"]) == len(log.anomalies) - 2


def test_watch_shows_one_row(explosion, tmp_path):
    out, _, log = explosion
    explode = _at_120(log)[0]
    view = tmp_path / "watch.txt"
    environment = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    with open(view, "w") as handle:
        done = subprocess.run([*MINDWATCH, "watch", str(out)], stdout=handle,
                              stderr=subprocess.PIPE, text=True, env=environment,
                              stdin=subprocess.DEVNULL, timeout=60)
    assert (done.returncode, done.stderr) == (0, "")
    text = view.read_text(encoding="utf-8")
    assert f"last anomalies ({_counts(log)})" in text
    row = _line_of_step_120(text.splitlines())
    assert row.split()[:2] == ["0", KINDS[0] + ","]                    # rank 0's
    assert row.rstrip().endswith(
        f"{explode['message']}; {VERDICT} [checkpoint+stop -> {explode['checkpoint']}]")
    assert text.count("computed again") == 1


def test_the_report_has_one_row_for_the_step(explosion):
    out, _, log = explosion
    explode = _at_120(log)[0]
    page = (out / "report.html").read_text(encoding="utf-8")
    rows = re.findall(r'<tr data-step="(\d+)" data-rank="(\d+)" data-kind="([\w ]+)">(.*?)</tr>',
                      page)
    assert [(step, rank, kinds) for step, rank, kinds, _ in rows] == [
        (str(a["step"]), "0", "throughput_drop") for a in log.anomalies[:-3]] + [
        ("120", "0", " ".join(KINDS))]
    cells = rows[-1][3]
    assert html.escape(f"{', '.join(KINDS)} at step 120: {explode['message']}; {VERDICT} "
                       f"[checkpoint+stop -> {explode['checkpoint']}]") in cells
    count = len(log.anomalies)
    assert f"<h2>Anomalies ({count} anomalies in {fmt.count(count - 2, 'event')})</h2>" in page
    assert page.count("computed again") == 1
