"""The user's model and data that the PyTorch blocks of the docs leave out, small enough to
train in a second (docs_table.py lists what each gives). Each runs in the block's temporary
directory and returns the names the block then finds."""
from __future__ import annotations

from typing import Any

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset, TensorDataset

BATCH, BATCHES = 8, 4


def _pairs(nan_batch: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """4 batches of 8 samples of 8 features; ``nan_batch`` (1-based) holds a NaN."""
    generator = torch.Generator().manual_seed(1)
    x = torch.randn(BATCH * BATCHES, 8, generator=generator)
    y = 0.5 * x[:, :1] + 0.1 * torch.randn(BATCH * BATCHES, 1, generator=generator)
    if nan_batch is not None:
        x[(nan_batch - 1) * BATCH, 0] = float("nan")
    return x, y


def _mlp() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 1))


def regression() -> dict[str, Any]:
    return {"model": _mlp(), "loss_fn": nn.MSELoss(),
            "loader": DataLoader(TensorDataset(*_pairs()), batch_size=BATCH)}


def regression_nan() -> dict[str, Any]:
    return {**regression(), "loader": DataLoader(TensorDataset(*_pairs(nan_batch=3)),
                                                 batch_size=BATCH)}


class _LossModel(nn.Module):
    """As a Hugging Face model: ``forward(x, labels)`` returns ``{"loss", "logits"}``."""

    def __init__(self):
        super().__init__()
        self.body = _mlp()

    def forward(self, x, labels=None):
        logits = self.body(x)
        out = {"logits": logits}
        if labels is not None:
            out["loss"] = nn.functional.mse_loss(logits, labels)
        return out


class _Samples(Dataset):
    def __init__(self):
        self.x, self.y = _pairs()

    def __len__(self):
        return len(self.x)

    def __getitem__(self, index):
        return {"x": self.x[index], "labels": self.y[index]}


def hf_trainer() -> dict[str, Any]:
    from transformers import TrainingArguments
    args = TrainingArguments(output_dir="hf-output", per_device_train_batch_size=BATCH,
                             max_steps=BATCHES, report_to=[], save_strategy="no",
                             logging_strategy="no", use_cpu=True, disable_tqdm=True,
                             dataloader_num_workers=0, seed=0)
    return {"model": _LossModel(), "args": args, "train_dataset": _Samples()}


def lightning_module() -> dict[str, Any]:
    import lightning.pytorch as pl

    class Regression(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.model = _mlp()

        def training_step(self, batch, batch_idx):
            x, y = batch
            return nn.functional.mse_loss(self.model(x), y)

        def configure_optimizers(self):
            return torch.optim.AdamW(self.parameters(), lr=1e-2)

    return {"module": Regression(), "epochs": 1,
            "loader": DataLoader(TensorDataset(*_pairs()), batch_size=BATCH)}
