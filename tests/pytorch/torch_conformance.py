"""The PyTorch rows of the conformance matrix: each pipeline users take (a plain loop,
Hugging Face's Trainer, Lightning) against each scenario, on the same small model and data.

A scenario poisons the step ``BAD_STEP``: the loss made NaN (NaN gradients), +Inf with finite
gradients, multiplied so the gradients explode, multiplied by 1000 (a spike, under
``on_anomaly={"loss_spike": "skip"}``), or the LR schedule jumping 1000x at that step."""
from __future__ import annotations

import io
import math
from dataclasses import dataclass, field

import torch
from torch import nn
from torch.utils.data import Dataset

STEPS = 40
BAD_STEP = 36          # after the spike rules' warm-up (spike_warmup=16 below)
SETTINGS = {"spike_warmup": 16, "print_interval": 1000}


@dataclass(frozen=True)
class Scenario:
    name: str
    poison: str | None = None              # what PoisonNet does to the loss at BAD_STEP
    lr_jump: bool = False
    settings: dict = field(default_factory=dict)
    kinds: frozenset = frozenset()         # anomalies at BAD_STEP
    also: frozenset = frozenset()          # the same event seen by other rules too
    stops: bool = True                     # the default policy stops at BAD_STEP


SCENARIOS = [
    Scenario("healthy", stops=False),
    Scenario("nan_loss", poison="nan", kinds=frozenset({"loss_nonfinite",
                                                        "gradient_nonfinite"})),
    Scenario("inf_loss_finite_grads", poison="inf", kinds=frozenset({"loss_nonfinite"})),
    Scenario("explosion", poison="explode", kinds=frozenset({"gradient_explode"}),
             also=frozenset({"loss_spike", "grad_spike"})),
    Scenario("lr_blow_up", lr_jump=True, kinds=frozenset({"lr_anomaly"})),
    Scenario("spike_skip", poison="spike", settings={"on_anomaly": {"loss_spike": "skip"},
                                                     "grad_explode": 1e9},
             kinds=frozenset({"loss_spike"}), also=frozenset({"grad_spike"}), stops=False),
]


class PoisonNet(nn.Module):
    """A small regression MLP whose forward returns ``{"loss", "logits"}`` (as Hugging Face
    models do) and poisons the loss of its ``BAD_STEP``-th training forward."""

    def __init__(self, poison: str | None):
        super().__init__()
        torch.manual_seed(0)
        self.body = nn.Sequential(nn.Linear(8, 32), nn.Tanh(), nn.Linear(32, 1))
        self.poison = poison
        self.calls = 0

    def forward(self, x, labels=None):
        logits = self.body(x)
        out = {"logits": logits}
        if labels is not None:
            loss = nn.functional.mse_loss(logits, labels)
            if self.training:
                self.calls += 1
                if self.calls == BAD_STEP:
                    loss = poisoned(loss, self.poison)
            out["loss"] = loss
        return out


def poisoned(loss: torch.Tensor, poison: str | None) -> torch.Tensor:
    if poison == "nan":
        return loss * math.nan
    if poison == "inf":
        return loss + math.inf           # d(loss + c)/dw: the gradients stay finite
    if poison == "explode":
        return loss * 1e7
    if poison == "spike":
        return loss * 1000
    return loss


def lr_factor(scenario: Scenario):
    """LambdaLR's factor for the 0-based scheduler step (the LR of step s + 1)."""
    return lambda index: 1000.0 if scenario.lr_jump and index == BAD_STEP - 1 else 1.0


class Pairs(Dataset):
    def __init__(self, n: int = STEPS * 8):
        generator = torch.Generator().manual_seed(1)
        self.x = torch.randn(n, 8, generator=generator)
        # mostly noise: the loss is about flat from the start, as after a warm-up, so the
        # spike rules' window holds no early descent
        self.y = self.x[:, :1] * 0.3 + torch.randn(n, 1, generator=generator)

    def __len__(self):
        return len(self.x)

    def __getitem__(self, index):
        return {"x": self.x[index], "labels": self.y[index]}


def run_plain(log_dir: str, scenario: Scenario) -> None:
    from mindwatch.torch import TrainMonitor
    model = PoisonNet(scenario.poison)
    monitor = TrainMonitor(log_dir, stream=io.StringIO(), **SETTINGS, **scenario.settings)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_factor(scenario))
    monitor.protect(optimizer, model=model, schedulers=[scheduler], clip_grad_norm=1.0)
    data = torch.utils.data.DataLoader(Pairs(), batch_size=8)
    for step, batch in enumerate(data, start=1):
        monitor.backward(model(**batch)["loss"])
        optimizer.step()
        optimizer.zero_grad()
        scheduler.step()
        if any(a.stops for a in monitor.observe(step=step)):
            break
    monitor.close()


def run_hf(log_dir: str, scenario: Scenario, tmp_dir: str, *, ranks: int = 1):
    """Under torchrun with ``ranks`` processes (DDP over gloo), each rank a batch of its own
    of the 8. Returns the callback and the trained model."""
    from transformers import Trainer, TrainingArguments

    from mindwatch.torch import HFCallback
    model = PoisonNet(scenario.poison)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_factor(scenario))
    args = TrainingArguments(output_dir=tmp_dir, per_device_train_batch_size=8 // ranks,
                             max_steps=STEPS, max_grad_norm=1.0, report_to=[],
                             save_strategy="no", logging_strategy="no", use_cpu=True,
                             disable_tqdm=True, dataloader_num_workers=0, seed=0,
                             **({"ddp_backend": "gloo"} if ranks > 1 else {}))
    callback = HFCallback(log_dir, stream=io.StringIO(), **SETTINGS, **scenario.settings)
    Trainer(model=model, args=args, train_dataset=Pairs(), optimizers=(optimizer, scheduler),
            callbacks=[callback]).train()
    return callback, model


def run_lightning(log_dir: str, scenario: Scenario, tmp_dir: str, *, ranks: int = 1):
    """As run_hf: under torchrun with ``ranks`` processes, Lightning's "ddp" strategy.
    Returns the callback and the trained model."""
    import lightning.pytorch as pl

    from mindwatch.torch import LightningCallback

    class Module(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = PoisonNet(scenario.poison)

        def training_step(self, batch, batch_idx):
            return self.net(**batch)["loss"]

        def configure_optimizers(self):
            optimizer = torch.optim.SGD(self.parameters(), lr=0.05)
            scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_factor(scenario))
            return {"optimizer": optimizer,
                    "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}

    callback = LightningCallback(log_dir, stream=io.StringIO(), **SETTINGS, **scenario.settings)
    trainer = pl.Trainer(max_steps=STEPS, accelerator="cpu", devices=ranks,
                         strategy="ddp" if ranks > 1 else "auto", logger=False,
                         enable_checkpointing=False, enable_progress_bar=False,
                         enable_model_summary=False, gradient_clip_val=1.0,
                         default_root_dir=tmp_dir, callbacks=[callback])
    module = Module()
    trainer.fit(module, torch.utils.data.DataLoader(Pairs(), batch_size=8 // ranks))
    return callback, module.net


PIPELINES = {"plain loop": run_plain, "HF Trainer": run_hf, "Lightning": run_lightning}
