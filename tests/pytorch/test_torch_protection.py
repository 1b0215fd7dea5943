"""monitor.protect(optimizer): a bad update withheld on the device, bit for bit, for every
torch.optim optimizer; healthy steps exactly those of a bare loop with clip_grad_norm_."""
import io
import math

import pytest

torch = pytest.importorskip("torch", reason="make test-torch runs these, in .venv-torch")

from torch import nn  # noqa: E402

from mindwatch.torch import TrainMonitor  # noqa: E402
from torch_helpers import batches, bitwise_equal, records, snapshot, tiny_model  # noqa: E402

OPTIMIZERS = {
    "SGD": lambda p: torch.optim.SGD(p, lr=0.05),
    "SGD-momentum-nesterov": lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.9, nesterov=True,
                                                       weight_decay=1e-4),
    "Adam": lambda p: torch.optim.Adam(p, lr=1e-2),
    "Adam-single-tensor": lambda p: torch.optim.Adam(p, lr=1e-2, foreach=False),
    "Adam-fused": lambda p: torch.optim.Adam(p, lr=1e-2, fused=True),
    "AdamW-amsgrad": lambda p: torch.optim.AdamW(p, lr=1e-2, amsgrad=True),
    "RMSprop-centered": lambda p: torch.optim.RMSprop(p, lr=1e-3, momentum=0.9, centered=True),
    "Adagrad": lambda p: torch.optim.Adagrad(p, lr=1e-2),
    "Adadelta": lambda p: torch.optim.Adadelta(p),
    "Adamax": lambda p: torch.optim.Adamax(p, lr=1e-2),
    "NAdam": lambda p: torch.optim.NAdam(p, lr=1e-2),
    "RAdam": lambda p: torch.optim.RAdam(p, lr=1e-2),
    "ASGD": lambda p: torch.optim.ASGD(p, lr=1e-2),
    "Rprop": lambda p: torch.optim.Rprop(p, lr=1e-2),
    "Adafactor": lambda p: torch.optim.Adafactor(p, lr=1e-2),
}


def loss_of(model, batch, poison=None):
    x, y = batch
    loss = nn.functional.mse_loss(model(x), y)
    return loss if poison is None else poison(loss)


def bare_run(name, data, skip_at=(), clip=1.0):
    """The reference: a bare loop with clip_grad_norm_ that does not train on ``skip_at``
    (its scheduler still counts them, as the protected loop's does)."""
    model = tiny_model()
    optimizer = OPTIMIZERS[name](model.parameters())
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=3, gamma=0.5)
    norms = []
    for step, batch in enumerate(data, start=1):
        if step not in skip_at:
            loss_of(model, batch).backward()
            norms.append(float(nn.utils.clip_grad_norm_(model.parameters(), clip)))
            optimizer.step()
            optimizer.zero_grad()
        scheduler.step()
    return model, optimizer, norms


def protected_run(tmp_path, name, data, poison_at=None, poison=None, on_host=None,
                  **settings):
    """``on_host``: the verdict read on the host (the CPU's way), or selected with on the
    device (an accelerator's way); None: as the device decides."""
    model = tiny_model()
    monitor = TrainMonitor(str(tmp_path / "run"), stream=io.StringIO(), **settings)
    optimizer = monitor.protect(OPTIMIZERS[name](model.parameters()), model=model,
                                clip_grad_norm=1.0)
    monitor.train_step.verdict_on_host = on_host
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=3, gamma=0.5)
    before_bad = None
    for step, batch in enumerate(data, start=1):
        bad = step == poison_at
        if bad:
            before_bad = snapshot(model, optimizer)
        monitor.backward(loss_of(model, batch, poison if bad else None))
        optimizer.step()
        if bad:
            after_bad = snapshot(model, optimizer)
        optimizer.zero_grad()
        scheduler.step()
        monitor.observe(step=step)
        if bad:
            # the pre-step state, whatever the device could not select settled by observe
            assert bitwise_equal(snapshot(model, optimizer)["state"], before_bad["state"])
            # the parameters were already back on the device, before the host read anything
            assert bitwise_equal(after_bad["params"], before_bad["params"])
    monitor.close()
    return model, optimizer, monitor


@pytest.mark.parametrize("on_host", [True, False], ids=["host-verdict", "device-verdict"])
@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_a_withheld_step_leaves_the_parameters_state_and_step_counts_as_they_were(
        tmp_path, name, on_host):
    data = batches(9)
    model, optimizer, _ = protected_run(
        tmp_path, name, data, poison_at=5, poison=lambda loss: loss * math.nan,
        on_host=on_host, on_anomaly={"loss_nonfinite": "skip", "gradient_nonfinite": "skip"})
    reference, reference_optimizer, _ = bare_run(name, data, skip_at={5})
    # training went on from the state before step 5 exactly as if its batch had never come
    assert bitwise_equal(snapshot(model, optimizer), snapshot(reference, reference_optimizer))
    steps = records(tmp_path / "run", "step")
    assert [r["skipped"] for r in steps] == [s == 5 for s in range(1, 10)]
    assert {a["anomaly"] for a in records(tmp_path / "run", "anomaly")} == {
        "loss_nonfinite", "gradient_nonfinite"}
    assert all(a["actions"] == ["skip"] for a in records(tmp_path / "run", "anomaly"))


@pytest.mark.parametrize("name", ["AdamW-amsgrad", "SGD-momentum-nesterov", "Adafactor"])
def test_a_withheld_first_step_leaves_no_optimizer_state(tmp_path, name):
    data = batches(4)
    model, optimizer, _ = protected_run(
        tmp_path, name, data[:1], poison_at=1, poison=lambda loss: loss + math.inf,
        on_anomaly={"loss_nonfinite": "skip"})
    assert len(optimizer.state) == 0
    first = tiny_model()
    assert bitwise_equal([p.detach() for p in model.parameters()],
                         [p.detach() for p in first.parameters()])


@pytest.mark.parametrize("on_host", [True, False], ids=["host-verdict", "device-verdict"])
@pytest.mark.parametrize("name", ["AdamW-amsgrad", "SGD-momentum-nesterov", "Adam-fused"])
def test_healthy_steps_are_those_of_a_bare_loop_with_clip_grad_norm(tmp_path, name, on_host):
    data = batches(8)
    model, optimizer, _ = protected_run(tmp_path, name, data, on_host=on_host)
    reference, reference_optimizer, norms = bare_run(name, data)
    assert bitwise_equal(snapshot(model, optimizer), snapshot(reference, reference_optimizer))
    steps = records(tmp_path / "run", "step")
    # the pre-clip norm, exactly the number clip_grad_norm_ returned (float32 in both)
    assert [r["grad_norm"] for r in steps] == norms
    assert [r["lr"] for r in steps] == [pytest.approx(lr, rel=0, abs=0) for lr in
                                        [OPTIMIZERS[name]([torch.zeros(1)]).defaults["lr"]
                                         * 0.5 ** ((s - 1) // 3) for s in range(1, 9)]]
    assert not any(r["skipped"] for r in steps)


def test_the_norm_is_get_total_norm_before_clipping_and_clipping_follows(tmp_path):
    model = tiny_model()
    monitor = TrainMonitor(str(tmp_path / "run"), stream=io.StringIO())
    optimizer = monitor.protect(torch.optim.SGD(model.parameters(), lr=0.0), model=model,
                                clip_grad_norm=0.01)
    x, y = batches(1)[0]
    monitor.backward(nn.functional.mse_loss(model(x), y) * 100)
    grads = [p.grad.clone() for p in model.parameters()]
    expected = nn.utils.get_total_norm(grads)
    optimizer.step()
    clipped = [p.grad.clone() for p in model.parameters()]
    monitor.observe(step=1)
    monitor.close()
    assert records(tmp_path / "run", "step")[0]["grad_norm"] == float(expected) > 0.01
    reference = [nn.Parameter(torch.zeros_like(g)) for g in grads]
    for param, grad in zip(reference, grads, strict=True):
        param.grad = grad.clone()
    nn.utils.clip_grads_with_norm_(reference, 0.01, expected)
    assert all(torch.equal(a, b.grad) for a, b in zip(clipped, reference, strict=True))
    assert float(nn.utils.get_total_norm(clipped)) == pytest.approx(0.01, rel=1e-4)


def test_an_infinite_loss_with_finite_gradients_is_withheld(tmp_path):
    data = batches(6)
    protected_run(tmp_path, "AdamW-amsgrad", data, poison_at=4,
                  poison=lambda loss: loss + math.inf)
    steps = records(tmp_path / "run", "step")
    assert steps[3]["loss"] == "Infinity" and math.isfinite(steps[3]["grad_norm"])
    assert steps[3]["skipped"] is True
    anomalies = records(tmp_path / "run", "anomaly")
    assert [a["anomaly"] for a in anomalies] == ["loss_nonfinite"]
    # the default policy stops: checkpoint and stop, the checkpoint holding the good state
    assert anomalies[0]["actions"] == ["checkpoint", "stop"]
    saved = torch.load(anomalies[0]["checkpoint"], weights_only=True)
    assert saved["step"] == 4
    reference, _, _ = bare_run("AdamW-amsgrad", data[:3])
    assert all(torch.equal(saved["model"][k], v) for k, v in reference.state_dict().items())


def test_an_explosion_is_withheld_and_stops_with_a_report(tmp_path):
    data = batches(6)
    _, _, monitor = protected_run(tmp_path, "Adam", data, poison_at=4,
                                  poison=lambda loss: loss * 1e6)
    step = records(tmp_path / "run", "step")[3]
    assert step["grad_norm"] > 100.0 and step["skipped"] is True
    (anomaly,) = records(tmp_path / "run", "anomaly")
    assert anomaly["anomaly"] == "gradient_explode"
    assert monitor.stop_requested.kind == "gradient_explode"
    report = (tmp_path / "run" / "anomalies" / "step4_rank0.md").read_text()
    assert "withheld" in report and "torch.load" in report


def test_an_lr_blow_up_is_withheld_before_the_step(tmp_path):
    model = tiny_model()
    monitor = TrainMonitor(str(tmp_path / "run"), stream=io.StringIO())
    optimizer = monitor.protect(torch.optim.SGD(model.parameters(), lr=0.01), model=model)
    for step, batch in enumerate(batches(6), start=1):
        if step == 5:
            optimizer.param_groups[0]["lr"] = 50.0
            before = snapshot(model, optimizer)
        monitor.backward(loss_of(model, batch))
        optimizer.step()
        optimizer.zero_grad()
        found = monitor.observe(step=step)
        if step == 5:
            assert [a.kind for a in found] == ["lr_anomaly"]
            assert bitwise_equal(snapshot(model, optimizer)["params"], before["params"])
            break
    monitor.close()
    assert records(tmp_path / "run", "step")[4]["skipped"] is True


def test_a_loss_spike_under_skip_is_withheld_and_training_goes_on(tmp_path):
    data = batches(50)
    _, _, monitor = protected_run(
        tmp_path, "SGD", data, poison_at=40, poison=lambda loss: loss * 40,
        on_anomaly={"loss_spike": "skip"}, spike_warmup=8, grad_explode=1e6)
    steps = records(tmp_path / "run", "step")
    assert [r["step"] for r in steps if r["skipped"]] == [40]
    assert [(a["anomaly"], a["actions"]) for a in records(tmp_path / "run", "anomaly")
            if a["step"] == 40][:1] == [("loss_spike", ["skip"])]
    assert monitor.stop_requested is None and len(steps) == 50


def test_gradient_accumulation_records_the_sum_of_the_losses_backpropagated(tmp_path):
    # the objective whose gradient the step applies: the loop's mean over its window
    model = tiny_model()
    monitor = TrainMonitor(str(tmp_path / "run"), stream=io.StringIO())
    optimizer = monitor.protect(torch.optim.SGD(model.parameters(), lr=0.01), model=model)
    micro = batches(2)
    losses = [loss_of(model, batch) for batch in micro]
    for loss in losses:
        monitor.backward(loss / 2)
    optimizer.step()
    monitor.observe(step=1)
    monitor.close()
    expected = losses[0].detach() / 2 + losses[1].detach() / 2
    assert records(tmp_path / "run", "step")[0]["loss"] == float(expected)


def test_bad_arguments_name_the_problem(tmp_path):
    monitor = TrainMonitor(str(tmp_path / "run"), stream=io.StringIO())
    model = tiny_model()
    with pytest.raises(TypeError, match=r"torch\.optim\.Optimizer"):
        monitor.protect(model)
    with pytest.raises(ValueError, match="clip_grad_norm"):
        monitor.protect(torch.optim.SGD(model.parameters(), lr=0.1), clip_grad_norm=-1.0)
    optimizer = monitor.protect(torch.optim.SGD(model.parameters(), lr=0.1))
    with pytest.raises(ValueError, match="one TrainMonitor per optimizer"):
        monitor.protect(torch.optim.SGD(model.parameters(), lr=0.1))
    with pytest.raises(TypeError, match="one value"):
        monitor.backward(torch.ones(3))
    assert optimizer is monitor.train_step.optimizer
    monitor.close()
