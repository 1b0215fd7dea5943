"""A withheld step reads as not taken as soon as ``optimizer.step()`` returns: parameters,
``optimizer.state``, ``optimizer.state_dict()`` and the scheduler, bit for bit, before
``observe``; on the CPU's way (the verdict on the host) and on an accelerator's (forced)."""
import copy
import io
import math
import pickle
from collections import defaultdict

import pytest

torch = pytest.importorskip("torch", reason="make test-torch runs these, in .venv-torch")

from torch import nn  # noqa: E402

from mindwatch.torch import TrainMonitor  # noqa: E402
from torch_helpers import HostReads, batches, bitwise_equal, records, tiny_model  # noqa: E402

PATHS = pytest.mark.parametrize("on_host", [True, False],
                                ids=["host-verdict", "device-verdict"])


def readable(model, optimizer, scheduler) -> dict:
    """Everything a user reads, copied: parameters, optimizer.state, state_dict(),
    the scheduler's state_dict()."""
    return {"params": [p.detach().clone() for p in model.parameters()],
            "state": {i: {k: v.clone() if isinstance(v, torch.Tensor) else v
                          for k, v in optimizer.state[p].items()}
                      for i, p in enumerate(model.parameters()) if p in optimizer.state},
            "state_dict": copy.deepcopy(optimizer.state_dict()),
            "scheduler": copy.deepcopy(scheduler.state_dict())}


def monitored(tmp_path, on_host, optimizer_factory=None):
    model = tiny_model()
    monitor = TrainMonitor(str(tmp_path / "run"), stream=io.StringIO(),
                           on_anomaly={"loss_nonfinite": "skip", "gradient_nonfinite": "skip"})
    factory = optimizer_factory or (lambda p: torch.optim.AdamW(p, lr=1e-2))
    optimizer = factory(model.parameters())
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda i: 0.9 ** i)
    monitor.protect(optimizer, model=model, schedulers=[scheduler])
    monitor.train_step.verdict_on_host = on_host
    return model, optimizer, scheduler, monitor


def step_of(model, batch, monitor, poison=False):
    x, y = batch
    loss = nn.functional.mse_loss(model(x), y)
    monitor.backward(loss * math.nan if poison else loss)


@PATHS
@pytest.mark.parametrize("bad", [1, 4], ids=["first-step", "fourth-step"])
def test_a_withheld_step_is_readable_as_not_taken_right_after_step_returns(tmp_path, on_host,
                                                                          bad):
    model, optimizer, scheduler, monitor = monitored(tmp_path, on_host)
    for step, batch in enumerate(batches(6), start=1):
        before = readable(model, optimizer, scheduler)
        step_of(model, batch, monitor, poison=step == bad)
        optimizer.step()
        if step == bad:
            # read before observe, in the order a checkpointing loop would
            after = readable(model, optimizer, scheduler)
            assert bitwise_equal(after, before)
            assert not math.isnan(float(after["params"][0].sum()))
            if bad == 1:                    # AdamW creates its state at its first step
                assert len(optimizer.state) == 0 and after["state_dict"]["state"] == {}
        optimizer.zero_grad()
        scheduler.step()
        monitor.observe(step=step)
        if step == bad:                     # and observe changes none of it
            assert bitwise_equal(readable(model, optimizer, scheduler)["state"],
                                 before["state"])
    monitor.close()
    assert [s["skipped"] for s in records(tmp_path / "run", "step")] == [
        s == bad for s in range(1, 7)]
    assert type(optimizer.state) is defaultdict      # the optimizer's own dict, as it was


class Counting(torch.optim.Optimizer):
    """SGD with momentum whose state holds what a device cannot select: a Python number
    (``count``) and a momentum tensor replaced by a new one at every step."""

    def __init__(self, params, lr=0.05):
        super().__init__(params, {"lr": lr})

    @torch.no_grad()
    def step(self, closure=None):
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                state["count"] = state.get("count", 0) + 1
                momentum = state.get("momentum", torch.zeros_like(p)) * 0.9 + p.grad
                state["momentum"] = momentum              # a new tensor, not in place
                p.add_(momentum, alpha=-group["lr"])


@PATHS
def test_numbers_and_replaced_state_tensors_are_settled_at_the_first_read(tmp_path, on_host):
    model, optimizer, scheduler, monitor = monitored(tmp_path, on_host, Counting)
    for step, batch in enumerate(batches(4), start=1):
        before = readable(model, optimizer, scheduler)
        step_of(model, batch, monitor, poison=step == 3)
        optimizer.step()
        after = readable(model, optimizer, scheduler)
        if step == 3:
            assert bitwise_equal(after, before)
            assert after["state"][0]["count"] == 2
        else:                               # a healthy step's state, read the same way
            assert after["state"][0]["count"] == before["state"].get(0, {}).get("count",
                                                                                0) + 1
        optimizer.zero_grad()
        scheduler.step()
        monitor.observe(step=step)
    monitor.close()
    assert [s["skipped"] for s in records(tmp_path / "run", "step")] == [
        False, False, True, False]


def test_on_the_accelerators_way_a_healthy_step_leaves_nothing_to_read(tmp_path):
    # every state tensor selected on the device: nothing waits for the verdict, so reading
    # the state between step() and observe reads nothing to the host
    model, optimizer, _, monitor = monitored(tmp_path, on_host=False)
    for step, batch in enumerate(batches(3), start=1):
        step_of(model, batch, monitor)
        optimizer.step()
        with HostReads() as reads:
            state = optimizer.state_dict()
            entries = list(optimizer.state.values())
        if step > 1:                       # the first step creates AdamW's state: settled
            assert reads.count == 0 and type(optimizer.state) is defaultdict
        assert len(state["state"]) == len(entries) == len(list(model.parameters()))
        optimizer.zero_grad()
        monitor.observe(step=step)
    monitor.close()


def test_state_loaded_or_copied_before_observe_is_the_settled_one(tmp_path):
    # a withheld first step on the accelerator's way: its state is removed when read, so
    # pickling the optimizer's state or loading a saved one sees no trace of it
    model, optimizer, _, monitor = monitored(tmp_path, on_host=False)
    saved = copy.deepcopy(optimizer.state_dict())
    step_of(model, batches(1)[0], monitor, poison=True)
    optimizer.step()
    held = optimizer.state                     # kept by a loop before the state is settled
    assert pickle.loads(pickle.dumps(held)) == {}
    first = next(iter(model.parameters()))
    held[first]["note"] = 1                    # a write through it reaches the optimizer
    assert optimizer.state[first] == {"note": 1} and len(held) == 1
    del held[first]
    optimizer.load_state_dict(saved)
    optimizer.zero_grad()
    monitor.observe(step=1)
    assert len(optimizer.state) == 0 and type(optimizer.state) is defaultdict
    step_of(model, batches(2)[1], monitor)
    optimizer.step()
    monitor.observe(step=2)
    monitor.close()
    assert len(optimizer.state) == len(list(model.parameters()))
    assert [s["skipped"] for s in records(tmp_path / "run", "step")] == [True, False]
