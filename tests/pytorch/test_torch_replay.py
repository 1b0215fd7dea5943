"""``replay`` under PyTorch: a withheld step computed again from the closures the loop gave
``monitor.backward``, on the same batches, weights and random state."""
import io

import pytest

torch = pytest.importorskip("torch", reason="make test-torch runs these, in .venv-torch")

from torch import nn  # noqa: E402

from mindwatch.torch import TrainMonitor  # noqa: E402
from torch_helpers import batches, bitwise_equal, records, snapshot  # noqa: E402


def dropout_model(seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Dropout(0.3), nn.Linear(32, 1))


def train(log_dir, *, loss_of, steps=8, accumulate=1, **settings):
    """A monitored loop whose every backward gets a closure; ``loss_of(step, call, x, y,
    model)`` computes a micro-batch's loss (``call``: how many times this step's closures
    have run, 0 the first time). Returns (model, optimizer, console output)."""
    model = dropout_model()
    stream = io.StringIO()
    monitor = TrainMonitor(str(log_dir), stream=stream, **settings)
    optimizer = monitor.protect(torch.optim.AdamW(model.parameters(), lr=1e-2), model=model)
    data = batches(steps * accumulate)
    calls: dict[int, int] = {}
    for step in range(1, steps + 1):
        for micro in range(accumulate):
            x, y = data[(step - 1) * accumulate + micro]

            def closure(step=step, micro=micro, x=x, y=y):
                call = calls.get(step, 0)
                if micro == accumulate - 1:
                    calls[step] = call + 1
                return loss_of(step, call, x, y, model)
            monitor.backward(closure)
        optimizer.step()
        optimizer.zero_grad()
        monitor.observe(step=step)
    monitor.close()
    return model, optimizer, stream.getvalue()


def mse(x, y, model):
    return nn.functional.mse_loss(model(x), y)


def test_a_batch_that_explodes_again_is_reproduced_bit_for_bit_dropout_included(tmp_path):
    # the batch itself is bad (inputs x 1e4): the replay draws the same dropout masks, so the
    # loss and norm come out the same to the bit, and the verdict blames the batch
    def loss_of(step, call, x, y, model):
        return mse(x * 1e4 if step == 5 else x, y, model)
    train(tmp_path / "run", loss_of=loss_of, accumulate=2, grad_explode=1e3)
    [replay] = records(tmp_path / "run", "replay")
    [step5] = [s for s in records(tmp_path / "run", "step") if s["step"] == 5]
    assert replay["step"] == 5 and replay["anomaly"] == "gradient_explode"
    assert replay["reproduced"] is True and replay["healthy"] is False
    assert (replay["replay_loss"], replay["replay_grad_norm"]) == (
        step5["loss"], step5["grad_norm"]) == (replay["loss"], replay["grad_norm"])
    assert step5["skipped"] is True
    [anomaly] = [a for a in records(tmp_path / "run", "anomaly") if a["step"] == 5]
    assert "bit-identical: the batch (step 5) or the model's state is the cause" in \
        anomaly["replay_verdict"]


def test_a_fault_that_does_not_come_back_is_a_transient_fault_and_leaves_no_trace(tmp_path):
    # the first computation of step 4 goes wrong, its replay does not (a flipped value on
    # the device): transient_fault, the update still withheld. After it the run is exactly
    # the one without replay: same weights, optimizer state, random state
    def loss_of(step, call, x, y, model):
        loss = mse(x, y, model)
        return loss * float("nan") if (step, call) == (4, 0) else loss
    model, optimizer, console = train(tmp_path / "run", loss_of=loss_of)
    [replay] = records(tmp_path / "run", "replay")
    assert replay["step"] == 4 and replay["reproduced"] is False and replay["healthy"] is True
    assert replay["loss"] == "NaN" and 0 < replay["replay_loss"] < 10     # NaN, then finite
    kinds = sorted(a["anomaly"] for a in records(tmp_path / "run", "anomaly"))
    assert kinds == ["gradient_nonfinite", "loss_nonfinite", "transient_fault"]
    [fault] = [a for a in records(tmp_path / "run", "anomaly")
               if a["anomaly"] == "transient_fault"]
    assert fault["step"] == 4 and fault["origin_rank"] == 0
    assert [s["skipped"] for s in records(tmp_path / "run", "step")] == \
        [False, False, False, True, False, False, False, False]
    plain, plain_optimizer, _ = train(tmp_path / "plain", loss_of=loss_of, replay=False)
    assert records(tmp_path / "plain", "replay") == []
    assert bitwise_equal(snapshot(model, optimizer), snapshot(plain, plain_optimizer))
    # one event on the console, the replay's verdict said once
    assert "ANOMALY loss_nonfinite, gradient_nonfinite, transient_fault at step 4" in console
    assert console.count("came out healthy (loss nan then ") == 1


def test_a_step_given_its_loss_is_not_replayed_and_the_run_is_told_why_once(tmp_path):
    model = dropout_model()
    stream = io.StringIO()
    monitor = TrainMonitor(str(tmp_path / "run"), stream=stream)
    optimizer = monitor.protect(torch.optim.SGD(model.parameters(), lr=0.01), model=model)
    for step, (x, y) in enumerate(batches(6), start=1):
        loss = mse(x, y, model)
        monitor.backward(loss * float("nan") if step in (3, 5) else loss)
        optimizer.step()
        optimizer.zero_grad()
        monitor.observe(step=step)
    monitor.close()
    assert records(tmp_path / "run", "replay") == []
    notices = [n["message"] for n in records(tmp_path / "run", "notice")
               if n["message"].startswith("replay")]
    assert notices == ["replay: the withheld step 3 was not computed again: monitor.backward "
                       "was given the loss: give it a closure that computes it "
                       "(monitor.backward(lambda: loss_fn(model(x), y))) to replay withheld "
                       "steps"]
