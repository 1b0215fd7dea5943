"""``monitor.backward(loss)`` without ``monitor.protect``: the loss is kept all the same
(``TrainMonitor.loss_window``, the sum since the last ``observe``, as a protected step's),
so ``observe`` logs it and catches a non-finite one; and AMP's scaled losses are recorded
unscaled."""
import io
import math

import pytest

torch = pytest.importorskip("torch", reason="make test-torch runs these, in .venv-torch")

from torch import nn  # noqa: E402

from mindwatch.torch import TrainMonitor  # noqa: E402
from torch_helpers import batches, records, tiny_model  # noqa: E402


def test_an_unprotected_loop_keeps_each_steps_loss_and_a_nan_is_caught(tmp_path):
    model = tiny_model()
    monitor = TrainMonitor(str(tmp_path / "run"), stream=io.StringIO())
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)     # not protected
    data = batches(8)
    own, found = [], []
    for step in range(1, 5):
        shares = []
        for x, y in data[2 * step - 2:2 * step]:           # two micro-batches a step
            loss = nn.functional.mse_loss(model(x), y) / 2
            if step == 4:                                   # the last: unprotected, a
                loss = loss * math.nan                      # NaN update would follow
            shares.append(loss.detach())
            monitor.backward(loss)
        own.append(float(shares[0] + shares[1]))
        optimizer.step()
        optimizer.zero_grad()
        found += monitor.observe(step=step)               # reads the kept sum, once
        assert monitor.loss_window.count == 0               # a new window begins
    monitor.close()
    logged = [s["loss"] for s in records(tmp_path / "run", "step")]
    assert logged[:3] == own[:3] and logged[3] == "NaN" and math.isnan(own[3])
    assert ("loss_nonfinite", 4) in [(a.kind, a.step) for a in found]
    assert all(a.step == 4 for a in found)


def test_a_loop_with_a_grad_scaler_records_the_unscaled_sum(tmp_path):
    model = tiny_model()
    monitor = TrainMonitor(str(tmp_path / "run"), stream=io.StringIO())
    optimizer = monitor.protect(torch.optim.SGD(model.parameters(), lr=0.05), model=model)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0 ** 12)
    own = []
    data = batches(6)
    for step in range(1, 4):
        total = 0.0
        for x, y in data[2 * step - 2:2 * step]:
            with torch.autocast("cpu", dtype=torch.float16):
                loss = nn.functional.mse_loss(model(x).float(), y) / 2
            total += float(loss.detach())
            monitor.backward(loss, scaler=scaler)
        own.append(total)
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad()
        monitor.observe(step=step)
    monitor.close()
    assert [s["loss"] for s in records(tmp_path / "run", "step")] == pytest.approx(own,
                                                                                  rel=1e-6)


def test_lightning_16_mixed_records_the_unscaled_loss_once_per_step(tmp_path):
    # Lightning's AMP runs the closure before optimizer.step() and backpropagates the loss
    # times the GradScaler's scale: the loss is recorded unscaled, the step measured once
    import lightning.pytorch as pl
    from lightning.pytorch.plugins import MixedPrecision

    from mindwatch.torch import LightningCallback
    returned: list[float] = []

    class Module(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = tiny_model()

        def training_step(self, batch, batch_idx):
            x, y = batch
            loss = nn.functional.mse_loss(self.net(x).float(), y)
            returned.append(loss.item())
            return loss

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.01)

    plugin = MixedPrecision("16-mixed", "cpu",
                            scaler=torch.amp.GradScaler("cpu", init_scale=2.0 ** 12))
    callback = LightningCallback(str(tmp_path / "run"), stream=io.StringIO())
    trainer = pl.Trainer(max_steps=3, accelerator="cpu", plugins=[plugin],
                         accumulate_grad_batches=2, logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False,
                         default_root_dir=str(tmp_path / "t"), callbacks=[callback])
    trainer.fit(Module(), torch.utils.data.DataLoader(batches(6), batch_size=None))
    steps = records(tmp_path / "run", "step")
    assert [s["loss"] for s in steps] == pytest.approx(
        [(a + b) / 2 for a, b in zip(returned[::2], returned[1::2], strict=True)], rel=1e-6)
    assert all(0 < s["grad_norm"] < 100 for s in steps)   # measured on unscaled gradients
