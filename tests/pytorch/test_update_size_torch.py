"""PyTorch's protected optimizer withholds the first update that would wreck the weights, with
no history (detectors/update_size.py): AdamW or SGD at LR 1e3, a plain loop with the verdict
read on the host (the CPU's way) or selected on the device (an accelerator's), and Hugging
Face's Trainer building its own AdamW from ``learning_rate=1e3``."""
import io

import pytest

torch = pytest.importorskip("torch", reason="make test-torch runs these, in .venv-torch")

from torch import nn  # noqa: E402

from mindwatch.torch import TrainMonitor  # noqa: E402
from torch_helpers import batches, records, tiny_model  # noqa: E402


@pytest.mark.parametrize("on_host", [True, False], ids=["host-verdict", "device-verdict"])
@pytest.mark.parametrize("name", ["AdamW", "SGD"])
def test_a_learning_rate_typed_1e3_is_withheld_on_step_1(tmp_path, name, on_host):
    model = tiny_model()
    before = [p.detach().clone() for p in model.parameters()]
    monitor = TrainMonitor(str(tmp_path), stream=io.StringIO(), hardware_interval_s=None)
    optimizer = monitor.protect(getattr(torch.optim, name)(model.parameters(), lr=1e3),
                                model=model)
    monitor.train_step.verdict_on_host = on_host
    for step, (x, y) in enumerate(batches(3), start=1):
        monitor.backward(nn.functional.mse_loss(model(x), y))
        optimizer.step()
        optimizer.zero_grad()
        monitor.observe(step=step)
        if monitor.stop_requested:
            break
    monitor.close(exit=False)
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))
    assert optimizer.state_dict()["state"] == {}          # no state from a withheld step
    (step,) = records(tmp_path, "step")
    assert (step["step"], step["skipped"], step["lr"]) == (1, True, 1e3)
    (anomaly,) = records(tmp_path, "anomaly")
    assert anomaly["anomaly"] == "lr_anomaly" and "would move the weights by" in \
        anomaly["message"]


def test_a_healthy_loop_at_a_usual_learning_rate_is_left_alone(tmp_path):
    model = tiny_model()
    monitor = TrainMonitor(str(tmp_path), stream=io.StringIO(), hardware_interval_s=None)
    optimizer = monitor.protect(torch.optim.AdamW(model.parameters(), lr=1e-2), model=model)
    for step, (x, y) in enumerate(batches(120), start=1):      # the weights measured again
        monitor.backward(nn.functional.mse_loss(model(x), y))
        optimizer.step()
        optimizer.zero_grad()
        assert monitor.observe(step=step) == []
    monitor.close()
    assert not any(s["skipped"] for s in records(tmp_path, "step"))


def test_hf_trainers_own_adamw_at_1e3_is_withheld_on_step_1(tmp_path):
    from transformers import Trainer, TrainingArguments

    from mindwatch.torch import HFCallback
    from torch_conformance import Pairs, PoisonNet
    model = PoisonNet(None)
    before = [p.detach().clone() for p in model.parameters()]
    args = TrainingArguments(output_dir=str(tmp_path / "hf"), per_device_train_batch_size=8,
                             max_steps=4, learning_rate=1e3, report_to=[], save_strategy="no",
                             logging_strategy="no", use_cpu=True, disable_tqdm=True,
                             dataloader_num_workers=0, seed=0)
    callback = HFCallback(str(tmp_path / "run"), stream=io.StringIO(),
                          hardware_interval_s=None)
    Trainer(model=model, args=args, train_dataset=Pairs(), callbacks=[callback]).train()
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))
    (step,) = records(tmp_path / "run", "step")
    assert step["skipped"] is True and step["step"] == 1
    assert [a["anomaly"] for a in records(tmp_path / "run", "anomaly")] == ["lr_anomaly"]
