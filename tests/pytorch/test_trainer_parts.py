"""Under Hugging Face's Trainer and Lightning: samples/s under Lightning (the batches it hands
the step), and replay, which neither trainer lets mindwatch do, said once in the run log."""
import dataclasses
import io
import math

import pytest

torch = pytest.importorskip("torch", reason="make test-torch runs these, in .venv-torch")

from torch import nn  # noqa: E402

from mindwatch.torch.reading.samples import samples_in  # noqa: E402
from torch_helpers import records  # noqa: E402

SKIP_NAN = {"on_anomaly": {"loss_nonfinite": "skip", "gradient_nonfinite": "skip"},
            "print_interval": 1000, "hardware_interval_s": None}
NAN_AT = (3, 5)            # training forwards whose loss is NaN: two withheld steps


def test_a_batch_counts_the_first_dimension_of_its_first_tensor():
    @dataclasses.dataclass
    class Features:
        names: list
        ids: torch.Tensor

    assert samples_in((torch.zeros(5, 3), torch.zeros(7))) == 5
    assert samples_in({"label": "x", "input_ids": torch.zeros(6, 16)}) == 6
    assert samples_in([{"scalar": torch.tensor(1.0)}, Features(["a"], torch.zeros(2, 1))]) == 2
    assert samples_in(["text", 3, torch.tensor(2.0)]) is None


def lightning_run(log_dir, *, batch: int, accumulate: int, steps: int, nan_at=(), **settings):
    import lightning.pytorch as pl

    from mindwatch.torch import LightningCallback

    class Regression(pl.LightningModule):
        def __init__(self):
            super().__init__()
            torch.manual_seed(0)
            self.net = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 1))
            self.forwards = 0

        def training_step(self, batch, batch_idx):
            self.forwards += 1
            loss = nn.functional.mse_loss(self.net(batch["x"]), batch["y"])
            return loss * math.nan if self.forwards in nan_at else loss

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.05)

    generator = torch.Generator().manual_seed(1)
    x = torch.randn(steps * batch * accumulate, 8, generator=generator)
    data = [{"x": row, "y": row[:1] * 0.5} for row in x]
    callback = LightningCallback(str(log_dir), stream=io.StringIO(), **settings)
    trainer = pl.Trainer(max_steps=steps, accelerator="cpu", devices=1, logger=False,
                         enable_checkpointing=False, enable_progress_bar=False,
                         enable_model_summary=False, accumulate_grad_batches=accumulate,
                         default_root_dir=str(log_dir), callbacks=[callback])
    trainer.fit(Regression(), torch.utils.data.DataLoader(data, batch_size=batch))


def test_lightning_samples_per_second_are_the_steps_batches_over_its_time(tmp_path):
    lightning_run(tmp_path / "run", batch=4, accumulate=2, steps=5, print_interval=1000,
                  hardware_interval_s=None)
    steps = records(tmp_path / "run", "step")
    assert len(steps) == 5
    for step in steps:         # two batches of 4 a step
        assert step["samples_per_s"] == pytest.approx(8 / step["step_time_s"], rel=1e-9)


def hf_run(log_dir, tmp_path, **settings):
    from transformers import Trainer, TrainingArguments

    from mindwatch.torch import HFCallback
    from torch_conformance import Pairs, PoisonNet

    class TwiceNaN(PoisonNet):
        def forward(self, x, labels=None):
            out = super().forward(x, labels)
            if self.training and self.calls in NAN_AT:
                out["loss"] = out["loss"] * math.nan
            return out

    args = TrainingArguments(output_dir=str(tmp_path / "out"), per_device_train_batch_size=8,
                             max_steps=8, report_to=[], save_strategy="no",
                             logging_strategy="no", use_cpu=True, disable_tqdm=True, seed=0)
    callback = HFCallback(str(log_dir), stream=io.StringIO(), **settings)
    Trainer(model=TwiceNaN(None), args=args, train_dataset=Pairs(),
            callbacks=[callback]).train()


@pytest.mark.parametrize("trainer", ["HF Trainer", "Lightning"])
def test_replay_under_a_trainer_is_said_once_not_to_be_possible(tmp_path, trainer):
    log_dir = tmp_path / "run"
    if trainer == "Lightning":
        lightning_run(log_dir, batch=8, accumulate=1, steps=8, nan_at=NAN_AT, **SKIP_NAN)
    else:
        hf_run(log_dir, tmp_path, **SKIP_NAN)
    steps = records(log_dir, "step")
    assert [s["step"] for s in steps if s["skipped"]] == list(NAN_AT)
    assert len(steps) == 8 and records(log_dir, "replay") == []
    said = [n["message"] for n in records(log_dir, "notice") if "replay" in n["message"]]
    name = "Hugging Face's Trainer" if trainer == "HF Trainer" else "Lightning"
    assert said == [f"replay: the withheld step 3 was not computed again: {name} computes the "
                    "step's batches itself (replay needs a plain loop whose monitor.backward "
                    "is given a closure)"]
