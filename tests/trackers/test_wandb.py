"""report_to="wandb" for real, in W&B's offline mode (no account, no network): each run is read
back from its ``.wandb`` transaction log with W&B's own reader (read_wandb.py): the step
scalars equal the run log's, the state charts are there, a stopped run ends "failed" with the
verdict, its alert and its files, a healthy one "finished"; a rewound run keeps its steps; a
full disk under W&B's directory costs a notice line, never the run."""
import io
import json
import math
import signal
import subprocess
import sys
import time

import pytest

wandb = pytest.importorskip("wandb", reason="report_to='wandb' needs W&B")

from against_log import check_against_log, step_records, stopped_run  # noqa: E402
from read_wandb import COMPLETED, STOPPED, read_wandb  # noqa: E402

from mindwatch import Monitor  # noqa: E402
from mindwatch.report.summary import summarize_dir  # noqa: E402

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(autouse=True)
def _no_wandb_env(monkeypatch):
    """The runner's own W&B settings do not leak in (a project, online mode, a directory)."""
    for name in ("WANDB_PROJECT", "WANDB_MODE", "WANDB_DIR", "WANDB_ENTITY", "WANDB_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("WANDB_ERROR_REPORTING", "false")


def _lines(log_dir):
    return [json.loads(line) for line in (log_dir / "rank_0.jsonl").read_text().splitlines()]


def _process_hooks():
    return (sys.stdout, sys.stderr, sys.exit, sys.excepthook,
            signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM))


def test_a_stopped_run_in_wandb(tmp_path):
    log_dir, where = tmp_path / "run", tmp_path / "wb"
    hooks = _process_hooks()
    stopped_run(log_dir, {"wandb": {"mode": "offline", "dir": str(where)}})
    # W&B took neither the console, nor sys.exit and the excepthook, nor a signal
    assert all(a is b for a, b in zip(hooks, _process_hooks(), strict=True))
    [run] = read_wandb(where)
    steps = step_records(log_dir)
    assert run.metrics["loss"][:4] == [(s["step"], s["loss"]) for s in steps[:4]]
    assert run.metrics["loss"][4][0] == 5 and math.isnan(run.metrics["loss"][4][1])
    assert run.metrics["state_update_ratio/dense.weight"] == [(2, 0.01)]
    assert run.metrics["state/weight_norm"] == [(2, 3.0)]
    assert run.status == STOPPED and not run.status.startswith("finished")
    assert run.end_reason == "stopped"
    assert run.verdict == summarize_dir(str(log_dir))["verdict"] == "1 ANOMALY"
    assert any("loss_nonfinite at step 5" in event and event.startswith("[ERROR]")
               for event in run.events), run.events
    assert json.loads(run.config["grad_explode"]) == 100.0
    assert run.config["mindwatch/rank"] == "0"
    assert "loss_nonfinite" in run.files["report.html"].decode()
    assert b"loss_nonfinite" in run.files["anomalies.jsonl"]
    check_against_log(run, log_dir, status=STOPPED, anomaly="loss_nonfinite",
                      setting=("policies", '"loss_nonfinite": "stop"'))
    assert run.name == "run"


def test_a_healthy_run_finishes_and_env_vars_are_honoured(tmp_path, monkeypatch):
    """WANDB_MODE, WANDB_PROJECT and WANDB_DIR name the run's mode, project and folder."""
    where = tmp_path / "wb"
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_PROJECT", "from-env")
    monkeypatch.setenv("WANDB_DIR", str(where))
    log_dir = tmp_path / "healthy"
    monitor = Monitor(str(log_dir), stream=io.StringIO(), hardware_interval_s=None,
                      report_to="wandb")
    for step in range(1, 11):
        monitor.observe(step=step, loss=1.0 / step, lr=0.01)
    monitor.close()
    [run] = read_wandb(where)
    check_against_log(run, log_dir, status=COMPLETED, anomaly=None)
    assert run.verdict == "HEALTHY" and run.end_reason == "completed"
    [folder] = (where / "wandb").glob("offline-run-*")
    summary = json.loads(_inspect_summary(folder))
    assert summary["project"] == "from-env" and summary["exit_code"] == 0
    assert summary["state"] == "finished"


def _inspect_summary(folder):
    from read_wandb import inspect
    return inspect(folder, "--summary")


def test_a_rewound_run_keeps_every_step(tmp_path):
    """Steps that go back (a rewind, a resume in the same segment) are all recorded, against
    the run log's step: W&B's own step would refuse them."""
    where, log_dir = tmp_path / "wb", tmp_path / "rewound"
    monitor = Monitor(str(log_dir), stream=io.StringIO(), hardware_interval_s=None,
                      report_to={"wandb": {"mode": "offline", "dir": str(where)}})
    logged = [1, 2, 3, 4, 5, 6, 4, 5, 6, 7]
    for index, step in enumerate(logged):
        monitor.observe(step=step, loss=float(index))
    monitor.close()
    [run] = read_wandb(where)
    assert run.metrics["loss"] == [(step, float(index)) for index, step in enumerate(logged)]
    assert run.status == COMPLETED


def test_two_segments_in_one_process_are_two_runs(tmp_path):
    where = tmp_path / "wb"
    for name in ("first", "second"):
        monitor = Monitor(str(tmp_path / name), stream=io.StringIO(), hardware_interval_s=None,
                          report_to={"wandb": {"mode": "offline", "dir": str(where)}})
        monitor.observe(step=1, loss=1.0)
        monitor.close()
    runs = read_wandb(where)
    assert [run.name for run in runs] == ["first", "second"]
    assert all(run.status == COMPLETED for run in runs)
    assert wandb.run is None            # the user's wandb.run is never mindwatch's


def test_a_full_disk_costs_a_line_and_never_the_run(tmp_path):
    """W&B's directory on a 64 KiB tmpfs: W&B itself drops what does not fit without a word;
    the run log says it once, every step is logged, the run ends "completed" in bounded time,
    and nothing W&B does reaches the training thread."""
    where = tmp_path / "full"
    where.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(where)],
                             capture_output=True, text=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip()}")
    try:
        log_dir = tmp_path / "run"
        monitor = Monitor(str(log_dir), stream=io.StringIO(), hardware_interval_s=None,
                          report_to={"wandb": {"mode": "offline", "dir": str(where)}})
        started = time.monotonic()
        for step in range(1, 1001):
            monitor.observe(step=step, loss=1.0 / step, lr=0.01, grad_norm=1.0)
        stepped = time.monotonic() - started
        monitor.close()
        closed = time.monotonic() - started
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)
    lines = _lines(log_dir)
    assert [r["step"] for r in lines if r["kind"] == "step"] == list(range(1, 1001))
    ends = [r for r in lines if r["kind"] == "end"]
    assert len(ends) == 1 and ends[0]["reason"] == "completed"
    said = [r["message"] for r in lines if r["kind"] == "notice" and "W&B" in r["message"]]
    assert len(said) == 1 and "KiB left on the disk" in said[0], said
    # the steps never waited for W&B; the end waited at most the drain (10 s)
    assert stepped < 10 and closed - stepped < 20, (stepped, closed)


def test_what_wandb_charts_itself_is_left_out(tmp_path):
    """W&B's system monitor charts the host and NVIDIA GPUs, not Ascend NPUs."""
    from mindwatch.trackers.wandb_sink import WandbSink

    sink = WandbSink({"mode": "offline"}, log_dir=str(tmp_path))
    assert not sink._keeps("hardware/cpu_percent") and not sink._keeps("hardware/gpu0/temp_c")
    assert sink._keeps("hardware/npu0/temp_c") and sink._keeps("loss")


def test_the_missing_package_is_said_at_construction(tmp_path):
    """Without wandb: the ImportError names the extra to install, before training starts."""
    code = ("import sys; sys.modules['wandb'] = None\n"
            "from mindwatch.trackers import open_tracker\n"
            "try:\n"
            f"    open_tracker('wandb', {{}}, {str(tmp_path)!r}, 0)\n"
            "except ImportError as exc:\n"
            "    print(exc)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert done.stdout.strip() == "report_to='wandb' needs W&B: pip install 'mindwatch[wandb]'"
