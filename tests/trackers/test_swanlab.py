"""report_to="swanlab" with the real SwanLab in its offline mode (no login, no network), read
back from SwanLab's own offline record (read_swanlab.py): the step scalars equal the run log's,
a stopped run ends CRASHED with the verdict, its anomaly as a text entry and its files; a
completed run ends SUCCESS; a SwanLab that cannot write costs one notice, never the run."""
import io
import json
import math
import os
import subprocess
import sys
import time

import pytest

swanlab = pytest.importorskip("swanlab", reason="report_to='swanlab' needs SwanLab")

from against_log import check_against_log, step_records, stopped_run  # noqa: E402
from read_swanlab import COMPLETED, STOPPED, read_swanlab, read_swanlab_runs, swanlab_errors  # noqa: E402

from mindwatch import Monitor  # noqa: E402
from mindwatch.report.summary import summarize_dir  # noqa: E402


def _stopped_run(log_dir, options):
    stopped_run(log_dir, {"swanlab": options})


def _lines(log_dir):
    return [json.loads(line) for line in (log_dir / "rank_0.jsonl").read_text().splitlines()]


def test_a_stopped_run_in_swanlab(tmp_path, capfd, monkeypatch):
    for name in ("SWANLAB_MODE", "SWANLAB_LOG_DIR", "SWANLAB_PROJ_NAME"):
        monkeypatch.delenv(name, raising=False)
    log_dir, swanlog, hook = tmp_path / "run", tmp_path / "swanlog", sys.excepthook
    _stopped_run(log_dir, {"mode": "offline", "logdir": str(swanlog), "project": "t45"})
    run = read_swanlab(swanlog)
    steps = step_records(log_dir)
    assert run.name == "run"
    assert run.metrics["loss"][:4] == [(s["step"], s["loss"]) for s in steps[:4]]
    assert math.isnan(dict(run.metrics["loss"])[5])       # SwanLab keeps NaN as "NaN"
    assert run.metrics["state_update_ratio/dense.weight"] == [(2, 0.01)]
    assert run.metrics["state/weight_norm"] == [(2, 3.0)]
    assert run.status == STOPPED
    assert run.end_reason == "stopped"
    assert run.verdict == summarize_dir(str(log_dir))["verdict"] == "1 ANOMALY"
    assert run.config["grad_explode"] == "100.0"
    assert json.loads(run.config["mindwatch/versions"])["mindwatch"]
    [event] = run.events
    assert event.startswith("step 5: loss_nonfinite [stop]"), event
    assert "loss_nonfinite" in run.files["report.html"].decode()
    assert b"loss_nonfinite" in run.files["anomalies.jsonl"]
    check_against_log(run, log_dir, status=STOPPED, anomaly="loss_nonfinite",
                      setting=("grad_explode", "100.0"))
    assert swanlab_errors(swanlog) == ["stopped: 1 ANOMALY"]
    # SwanLab printed nothing, kept no hook, left no run open and no environment behind
    out, err = capfd.readouterr()
    assert "swanlab" not in (out + err).lower(), out + err
    assert sys.excepthook is hook and swanlab.get_run() is None
    assert not {"SWANLAB_MODE", "SWANLAB_LOG_DIR", "SWANLAB_PROJ_NAME"} & set(os.environ)
    notices = [r["message"] for r in _lines(log_dir) if r["kind"] == "notice"]
    assert not [m for m in notices if "SwanLab" in m], notices


def test_a_completed_run_ends_in_success_and_a_second_segment_is_a_second_run(tmp_path):
    log_dir, swanlog = tmp_path / "run", tmp_path / "swanlog"
    for segment in range(2):        # two segments in one process, one after the other
        monitor = Monitor(str(log_dir), stream=io.StringIO(), hardware_interval_s=None,
                          report_to={"swanlab": {"mode": "offline", "logdir": str(swanlog)}},
                          resume=segment > 0)
        for step in range(1 + 10 * segment, 11 + 10 * segment):
            monitor.observe(step=step, loss=1.0 / step, lr=0.01)
        monitor.close()
    first, second = read_swanlab_runs(swanlog)
    assert first.status == second.status == COMPLETED
    assert [s for s, _ in first.metrics["loss"]] == list(range(1, 11))
    assert [s for s, _ in second.metrics["loss"]] == list(range(11, 21))
    assert second.end_reason == "completed" and not second.events
    assert second.verdict == summarize_dir(str(log_dir))["verdict"]
    assert b"<html" in second.files["report.html"].lower()
    assert swanlab_errors(swanlog) == []


def test_the_project_and_mode_come_from_swanlabs_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("SWANLAB_PROJECT", "from-env")
    monkeypatch.setenv("SWANLAB_MODE", "offline")
    monkeypatch.setenv("SWANLAB_LOG_DIR", str(tmp_path / "env-swanlog"))
    log_dir = tmp_path / "run"
    monitor = Monitor(str(log_dir), stream=io.StringIO(), hardware_interval_s=None,
                      report_to="swanlab")
    for step in range(1, 4):
        monitor.observe(step=step, loss=1.0 / step)
    monitor.close()
    from swanlab.log.backup.datastore import DataStore
    from swanlab.log.backup.models import BaseModel, Project

    [folder] = (tmp_path / "env-swanlog").glob("run-*")
    store = DataStore()
    store.open_for_scan(str(folder / "backup.swanlab"))
    [project] = [r for r in map(BaseModel.from_record, store) if isinstance(r, Project)]
    store.close()
    assert project.name == "from-env"
    assert read_swanlab(tmp_path / "env-swanlog").status == COMPLETED
    assert os.environ["SWANLAB_MODE"] == "offline"      # the user's own, left as it was


def test_the_default_is_offline_under_the_run_directory_without_credentials(tmp_path,
                                                                           monkeypatch):
    for name in ("SWANLAB_MODE", "SWANLAB_LOG_DIR", "SWANLAB_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("SWANLAB_SAVE_DIR", str(tmp_path / "no-login"))   # no ~/.swanlab key
    log_dir = tmp_path / "run"
    monitor = Monitor(str(log_dir), stream=io.StringIO(), hardware_interval_s=None,
                      report_to="swanlab")
    monitor.observe(step=1, loss=1.0)
    monitor.close()
    run = read_swanlab(log_dir / "swanlog")
    assert run.status == COMPLETED and run.metrics["loss"] == [(1, 1.0)]


def test_cloud_without_credentials_is_said_and_never_asks_for_a_login(tmp_path, monkeypatch):
    monkeypatch.delenv("SWANLAB_API_KEY", raising=False)
    monkeypatch.setenv("SWANLAB_SAVE_DIR", str(tmp_path / "no-login"))
    log_dir = tmp_path / "run"
    monitor = Monitor(str(log_dir), stream=io.StringIO(), hardware_interval_s=None,
                      report_to={"swanlab": {"mode": "cloud"}})
    monitor.observe(step=1, loss=1.0)
    monitor.close()
    said = [r["message"] for r in _lines(log_dir) if r["kind"] == "notice"]
    assert len(said) == 1 and "needs `swanlab login` or SWANLAB_API_KEY" in said[0], said
    assert not (log_dir / "swanlog").exists()


def test_a_second_monitor_in_the_process_is_told_swanlab_holds_one_run(tmp_path):
    """SwanLab holds one run a process: a second monitor's tracker says so once; the first
    monitor's run is untouched."""
    options = {"mode": "offline", "logdir": str(tmp_path / "swanlog")}
    first = Monitor(str(tmp_path / "first"), stream=io.StringIO(), hardware_interval_s=None,
                    report_to={"swanlab": options})
    first.observe(step=1, loss=1.0)
    deadline = time.monotonic() + 30
    while swanlab.get_run() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    second = Monitor(str(tmp_path / "second"), stream=io.StringIO(), hardware_interval_s=None,
                     report_to={"swanlab": options})
    for step in range(1, 4):
        second.observe(step=step, loss=1.0)
        first.observe(step=step + 1, loss=1.0)
    second.close()
    first.close()
    said = [r["message"] for r in _lines(tmp_path / "second") if r["kind"] == "notice"]
    assert len(said) == 1 and "another SwanLab run is open" in said[0], said
    run = read_swanlab(tmp_path / "swanlog")
    assert run.name == "first" and run.status == COMPLETED
    assert [step for step, _ in run.metrics["loss"]] == [1, 2, 3, 4]


def _failing_run(log_dir, swanlog):
    monitor = Monitor(str(log_dir), stream=io.StringIO(), hardware_interval_s=None,
                      report_to={"swanlab": {"mode": "offline", "logdir": str(swanlog)}})
    started = time.monotonic()
    for step in range(1, 51):
        monitor.observe(step=step, loss=1.0 / step)
    stepped = time.monotonic() - started
    monitor.close()
    lines = _lines(log_dir)
    assert [r["step"] for r in lines if r["kind"] == "step"] == list(range(1, 51))
    ends = [r for r in lines if r["kind"] == "end"]
    assert len(ends) == 1 and ends[0]["reason"] == "completed"
    said = [r["message"] for r in lines if r["kind"] == "notice" and "SwanLab" in r["message"]]
    assert len(said) == 1 and "did not take" in said[0], said
    assert stepped < 5, stepped
    assert swanlab.get_run() is None
    return said[0]


def test_a_file_where_swanlabs_directory_should_be_costs_a_line_and_never_the_run(tmp_path):
    swanlog = tmp_path / "swanlog"
    swanlog.write_text("a file, not a directory")
    said = _failing_run(tmp_path / "run", swanlog)
    assert "logdir" in said, said


@pytest.mark.skipif(os.geteuid() != 0, reason="mounting a tmpfs needs root")
def test_a_full_filesystem_under_swanlab_costs_a_line_and_never_the_run(tmp_path):
    swanlog = tmp_path / "swanlog"
    swanlog.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(swanlog)],
                             capture_output=True, text=True)
    if mounted.returncode:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip()}")
    try:
        (swanlog / "filler").write_bytes(b"\0" * 60_000)        # a few kB left
        _failing_run(tmp_path / "run", swanlog)
    finally:
        subprocess.run(["umount", str(swanlog)], check=True)   # busy: SwanLab kept its file
    # the next run in the process starts a SwanLab run of its own again
    log_dir, good = tmp_path / "next", tmp_path / "good"
    _stopped_run(log_dir, {"mode": "offline", "logdir": str(good)})
    assert read_swanlab(good).status == STOPPED
