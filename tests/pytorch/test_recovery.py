"""Rewind (model, optimizer and scheduler snapshots) and the checkpoint a run resumes from."""
import io

import pytest

torch = pytest.importorskip("torch", reason="make test-torch runs these, in .venv-torch")

from torch import nn  # noqa: E402

from mindwatch.torch import TrainMonitor  # noqa: E402
from torch_helpers import batches, bitwise_equal, records, snapshot, tiny_model  # noqa: E402


def test_a_rewind_puts_back_model_optimizer_and_schedule_bit_for_bit(tmp_path):
    model = tiny_model()
    monitor = TrainMonitor(str(tmp_path / "run"), stream=io.StringIO(),
                           on_anomaly={"loss_spike": "rewind"}, snapshot_every=5,
                           spike_warmup=8, grad_explode=1e9)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=4, gamma=0.9)
    monitor.protect(optimizer, model=model, schedulers=[scheduler])
    saved = {}
    for step, (x, y) in enumerate(batches(40), start=1):
        loss = nn.functional.mse_loss(model(x), y)
        monitor.backward(loss * 50 if step == 33 else loss)
        optimizer.step()
        optimizer.zero_grad()
        scheduler.step()
        monitor.observe(step=step)
        saved[step] = (snapshot(model, optimizer), scheduler.state_dict())
        if step == 33:
            break
    monitor.close()
    (rewind,) = records(tmp_path / "run", "rewind")
    assert (rewind["step"], rewind["to_step"]) == (33, 30)
    # the spike's update was applied (loss_spike is on "rewind", not "skip"): the state
    # after step 30 is back, and the schedule with it
    assert bitwise_equal(snapshot(model, optimizer), saved[30][0])
    assert scheduler.state_dict() == saved[30][1]
    assert optimizer.param_groups[0]["lr"] == saved[30][0]["groups"][0]["lr"]


def test_the_stop_checkpoint_resumes_the_run(tmp_path):
    model = tiny_model()
    monitor = TrainMonitor(str(tmp_path / "run"), stream=io.StringIO())
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    scheduler = torch.optim.lr_scheduler.ExponentialLR(optimizer, gamma=0.95)
    monitor.protect(optimizer, model=model, schedulers=[scheduler])
    for step, (x, y) in enumerate(batches(8), start=1):
        loss = nn.functional.mse_loss(model(x), y)
        monitor.backward(loss * float("nan") if step == 6 else loss)
        optimizer.step()
        optimizer.zero_grad()
        scheduler.step()
        if any(a.stops for a in monitor.observe(step=step)):
            break
    monitor.close()
    assert step == 6
    (anomaly, _) = records(tmp_path / "run", "anomaly")
    saved = torch.load(anomaly["checkpoint"], weights_only=True)
    resumed = tiny_model(seed=5)
    resumed_optimizer = torch.optim.SGD(resumed.parameters(), lr=0.05, momentum=0.9)
    resumed_scheduler = torch.optim.lr_scheduler.ExponentialLR(resumed_optimizer, gamma=0.95)
    resumed.load_state_dict(saved["model"])
    resumed_optimizer.load_state_dict(saved["optimizer"])
    resumed_scheduler.load_state_dict(saved["schedulers"][0])
    # the state after step 5 (step 6's update withheld), the schedule after step 6
    assert bitwise_equal(snapshot(resumed, resumed_optimizer), snapshot(model, optimizer))
    assert resumed_scheduler.state_dict() == scheduler.state_dict()
    report = (tmp_path / "run" / "anomalies" / "step6_rank0.md").read_text()
    assert 'optimizer.load_state_dict(saved["optimizer"])' in report
