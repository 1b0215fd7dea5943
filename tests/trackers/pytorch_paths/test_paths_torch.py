"""report_to under PyTorch as users train: a plain loop (``TrainMonitor``, ``protect``), Hugging
Face's Trainer with gradient accumulation, and Lightning, each a process of its own, stopped
by a NaN loss (``stop_exit_code`` 42). The tracker's run ends as a stopped one with every
step's loss, the withheld step, the settings, ``mindwatch summary``'s verdict, the anomaly,
its reports and the HTML report, all equal to the run log's. Run by make test-trackers in
.venv-torch, the MLflow server from .venv-trackers."""
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("torch", reason="make test-trackers runs these in .venv-torch")

TESTS = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(TESTS / "trackers"), str(TESTS / "pytorch")]

from against_log import check_against_log, step_records  # noqa: E402
from every_tracker import NAMES, tracker_for  # noqa: E402

SCRIPT = TESTS / "pytorch" / "trainer_stop_script.py"
pytestmark = pytest.mark.timeout(300)

PLAIN_LOOP = textwrap.dedent("""
    import json, sys
    import torch
    from torch import nn
    import mindwatch.torch

    log_dir, settings = sys.argv[1], json.loads(sys.argv[2])
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))
    monitor = mindwatch.torch.TrainMonitor(log_dir, stop_exit_code=42, hardware_interval_s=None,
                                           **settings)
    optimizer = monitor.protect(torch.optim.AdamW(model.parameters(), lr=1e-3), model=model)
    for step in range(1, 9):
        x, y = torch.randn(16, 8), torch.randn(16, 1)
        loss = nn.functional.mse_loss(model(x), y)
        monitor.backward(loss * float("nan") if step == 5 else loss)
        optimizer.step()
        optimizer.zero_grad()
        monitor.observe(step=step)
        if monitor.stop_requested:
            break
    monitor.close()
""")


def _run(command: list[str]) -> None:
    done = subprocess.run(command, capture_output=True, text=True, timeout=240,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert done.returncode == 42, (done.stdout + done.stderr)[-3000:]


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("path", ["plain", "hf_accumulating", "lightning"])
def test_a_stopped_pytorch_run(path, name, request, tmp_path):
    tracker = tracker_for(request, name, tmp_path)
    log_dir, experiment = tmp_path / "run", f"torch-{path}"
    settings = {"report_to": tracker.report_to(experiment)}
    if path == "plain":
        _run([sys.executable, "-c", PLAIN_LOOP, str(log_dir), json.dumps(settings)])
        stopped_at = 5
    else:
        trainer, *more = ("hf", "--accumulate", "2") if path == "hf_accumulating" else \
            ("lightning",)
        # HF: the 6th forward is the 2nd micro-batch of optimizer step 3
        _run([sys.executable, str(SCRIPT), trainer, str(log_dir), str(tmp_path / "out"),
              "--nan-at", "6", "--settings", json.dumps(settings), *more])
        stopped_at = 3 if path == "hf_accumulating" else 6
    assert [s["step"] for s in step_records(log_dir)] == list(range(1, stopped_at + 1))
    check_against_log(tracker.read(experiment), log_dir, status=tracker.stopped,
                      anomaly="loss_nonfinite",
                      setting=("stop_exit_code", "42"))
