"""Run directories with thousands of files: `summary` and `report` do work in proportion to
what the log holds, never to the files lying around, and never quadratic. Asserted on the
file-system calls made (counted), with a generous wall-time bound beside."""
import builtins
import collections
import contextlib
import io
import json
import os
import time

import pytest

from mindwatch import records
from mindwatch.cli import main

COUNTED = ("scandir", "listdir", "stat", "lstat", "open", "getcwd")


@contextlib.contextmanager
def counting(monkeypatch):
    """Counts calls to the os functions that touch the file system, and to open()."""
    calls = collections.Counter()

    def wrap(owner, name):
        real = getattr(owner, name)

        def counted(*args, **kwargs):
            calls[name] += 1
            return real(*args, **kwargs)
        monkeypatch.setattr(owner, name, counted)
    for name in COUNTED:
        wrap(os, name)
    wrap(builtins, "open")
    calls["open"] = 0
    yield calls
    monkeypatch.undo()


def make_run(directory, *, anomalies, unrelated, reports):
    """A log of 300 steps and ``anomalies`` anomaly records (each with its report files), plus
    ``reports`` other anomaly reports and ``unrelated`` other files in the directory."""
    (directory / "anomalies").mkdir(parents=True)
    lines = [{"kind": "run", "rank": 0, "time": 0.0, "schema": 1, "world_size": 1, "host": "h",
              "pid": 1, "config": {}, "versions": {}}]
    for step in range(1, 301):
        lines.append({"kind": "step", "rank": 0, "time": float(step), "step": step, "epoch": 1,
                      "loss": 1.0 / step, "loss_smooth": 1.0, "lr": 1e-3, "grad_norm": 1.0,
                      "step_time_s": 0.1, "skipped": False})
    for index in range(anomalies):
        report = directory / "anomalies" / f"step{index}_rank0.json"
        lines.append({"kind": "anomaly", "rank": 0, "time": 1.0, "anomaly": "loss_spike",
                      "step": index % 300 + 1, "value": 9.0, "threshold": 4.0,
                      "message": "spike", "actions": ["warn"], "checkpoint": None,
                      "report": str(report)})
    lines.append({"kind": "end", "rank": 0, "time": 2.0, "reason": "completed", "steps": 300,
                  "elapsed_s": 1.0})
    (directory / "rank_0.jsonl").write_text("".join(records.encode(r) + "\n" for r in lines))
    for index in range(anomalies + reports):
        for suffix in (".json", ".md"):
            (directory / "anomalies" / f"step{index}_rank0{suffix}").write_text("{}")
    for index in range(unrelated):
        (directory / f"notes_{index}.txt").write_text("x")


def run_commands(directory, out):
    with contextlib.redirect_stdout(io.StringIO()) as stdout:
        assert main(["summary", str(directory), "--json"]) == 1       # anomalies: exit 1
        assert main(["report", str(directory), "-o", str(out)]) == 0
    return json.loads(stdout.getvalue().split("\n}\n")[0] + "\n}")


def measure(tmp_path, monkeypatch, name, **sizes):
    directory = tmp_path / name
    make_run(directory, **sizes)
    out = tmp_path / f"{name}.html"
    start = time.perf_counter()
    with counting(monkeypatch) as calls:
        summary = run_commands(directory, out)
    return summary, dict(calls), time.perf_counter() - start


@pytest.fixture(autouse=True)
def warm(tmp_path_factory):
    """Both commands once, uncounted: their first run imports modules lazily (the parallel
    reader's multiprocessing calls os.getcwd on import), which is not work per file."""
    directory = tmp_path_factory.mktemp("warm") / "run"
    make_run(directory, anomalies=1, unrelated=0, reports=0)
    run_commands(directory, directory / "report.html")


def test_unrelated_files_and_reports_cost_nothing(tmp_path, monkeypatch):
    small, calls_small, _ = measure(tmp_path, monkeypatch, "small", anomalies=20,
                                    unrelated=1000, reports=1000)
    big, calls_big, _ = measure(tmp_path, monkeypatch, "big", anomalies=20, unrelated=4000,
                                reports=5000)
    assert small["anomalies"] == big["anomalies"] == 20
    assert calls_small == calls_big, (calls_small, calls_big)
    listings = calls_big.get("scandir", 0) + calls_big.get("listdir", 0)
    assert calls_big["open"] <= 10 and listings <= 4


@pytest.mark.parametrize("unrelated", [2000])
def test_work_grows_linearly_with_the_anomalies_in_the_log(tmp_path, monkeypatch, unrelated):
    _, calls_1k, seconds_1k = measure(tmp_path, monkeypatch, "a1k", anomalies=1000,
                                      unrelated=unrelated, reports=0)
    summary, calls_4k, seconds_4k = measure(tmp_path, monkeypatch, "a4k", anomalies=4000,
                                            unrelated=unrelated, reports=1000)
    assert summary["anomalies"] == 4000
    for name in COUNTED:
        # Constant plus at most a few calls per anomaly (the report's links), so 4x the
        # anomalies is at most 4x the calls: linear, not quadratic.
        assert calls_4k.get(name, 0) <= 4 * calls_1k.get(name, 0) + 10, (name, calls_1k,
                                                                          calls_4k)
    assert calls_4k["open"] == calls_1k["open"] and calls_4k["scandir"] == calls_1k["scandir"]
    assert seconds_4k < 4 * seconds_1k * 3 + 1.0, (seconds_1k, seconds_4k)
