"""A plain loop's exit status and its view of a run mindwatch could not watch: the process of
a run mindwatch stopped exits with ``stop_exit_code`` once ``close`` has written the run, and
a loop that forgot ``protect`` is told so, its NaN loss still caught."""
import subprocess
import sys
import textwrap

import pytest

torch = pytest.importorskip("torch", reason="make test-torch runs these, in .venv-torch")

from torch_helpers import records  # noqa: E402

# docs/torch.md's loop, on a small model, its loss NaN at NAN_STEP ("never": healthy);
# protect or not (PROTECT)
SCRIPT = textwrap.dedent("""
    import sys
    import torch
    from torch import nn
    import mindwatch.torch

    log_dir, nan_step, protect = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "1"
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))
    monitor = mindwatch.torch.TrainMonitor(log_dir, stop_exit_code=42, hardware_interval_s=None)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    if protect:
        optimizer = monitor.protect(optimizer, model=model)
    for step in range(1, 9):
        x, y = torch.randn(16, 8), torch.randn(16, 1)
        loss = nn.functional.mse_loss(model(x), y)
        monitor.backward(loss * float("nan") if step == nan_step else loss)
        optimizer.step()
        optimizer.zero_grad()
        monitor.observe(step=step)
        if monitor.stop_requested:
            break
    monitor.close()
    print("closed")
""")


def run(tmp_path, nan_step: int, protect: bool) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", SCRIPT, str(tmp_path), str(nan_step),
                           "1" if protect else "0"], capture_output=True, text=True,
                          timeout=120)


def test_a_stopped_plain_loop_exits_with_stop_exit_code_after_its_run_is_written(tmp_path):
    done = run(tmp_path, nan_step=3, protect=True)
    assert done.returncode == 42, done.stderr[-2000:]
    assert "closed" not in done.stdout
    assert "training stopped by loss_nonfinite at step 3; exiting with status 42" in done.stderr
    (end,) = records(tmp_path, "end")
    assert (end["reason"], end["steps"]) == ("stopped", 3)
    assert [s["skipped"] for s in records(tmp_path, "step")] == [False, False, True]


def test_a_healthy_plain_loop_exits_as_the_script_does(tmp_path):
    done = run(tmp_path, nan_step=-1, protect=True)
    assert done.returncode == 0 and "closed" in done.stdout, done.stderr[-2000:]
    (end,) = records(tmp_path, "end")
    assert end["reason"] == "completed"
    assert not [n for n in records(tmp_path, "notice") if n.get("unwatched")]


def test_a_loop_that_never_protected_its_optimizer_is_told_and_its_nan_loss_caught(tmp_path):
    """The docs' loop without ``monitor.protect``: the loss handed to ``backward`` is still
    judged (a NaN is ``loss_nonfinite``, which stops the run), but its update cannot be
    withheld: the run says once that it is not watched as set up, and how to fix it."""
    done = run(tmp_path, nan_step=3, protect=False)
    assert done.returncode == 42, done.stderr[-2000:]
    steps = records(tmp_path, "step")
    assert [s["step"] for s in steps] == [1, 2, 3]
    assert steps[0]["loss"] > 0 and steps[2]["loss"] == "NaN"
    assert [s["skipped"] for s in steps] == [False, False, False]       # not withheld
    (nan,) = [a for a in records(tmp_path, "anomaly") if a["anomaly"] == "loss_nonfinite"]
    assert nan["step"] == 3
    (unwatched,) = [n for n in records(tmp_path, "notice") if n.get("unwatched")]
    assert "monitor.protect(optimizer)" in unwatched["unwatched"]
    assert records(tmp_path)[1:].index(unwatched) < 2        # said at the first step
