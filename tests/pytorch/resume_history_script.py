"""One process of a run resumed from its checkpoint, as a user's script runs it, for
test_resumed_history_torch.py:

    python resume_history_script.py LOOP LOG_DIR CKPT_DIR FIRST LAST [--resume]

LOOP: "plain" (a protected AdamW in a plain loop; the checkpoint of the last step is
``CKPT_DIR/last.pt``), "hf" (a tiny GPT-2 built from its config under Hugging Face's
Trainer, saving ``CKPT_DIR/checkpoint-<LAST>``) or "lightning" (a LightningModule whose
Trainer saves ``CKPT_DIR/step<N>.ckpt`` every 10 steps, resumed with ``fit(ckpt_path=...)``).
Steps FIRST to LAST; ``--resume``: from the checkpoint of step FIRST - 1, with
``TrainMonitor``/``HFCallback``/``LightningCallback`` given ``resume=True``.
The LR is 1e-3 to step 10 and 500 after (a schedule or an argument mistyped for the
resume). Prints the anomalies' ``step kind actions`` lines.
"""
from __future__ import annotations

import argparse
import io
import os

import torch

SETTINGS = {"print_interval": 1000, "hardware_interval_s": None, "stop_exit_code": None}


def lr_at(step: int) -> float:
    return 1e-3 if step <= 10 else 500.0


def plain(log_dir: str, ckpt_dir: str, first: int, last: int, resume: bool) -> None:
    from torch import nn

    from mindwatch.torch import TrainMonitor
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.LayerNorm(16), nn.ReLU(), nn.Linear(16, 1))
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr_at(first))
    if resume:
        saved = torch.load(os.path.join(ckpt_dir, "last.pt"), weights_only=True)
        model.load_state_dict(saved["model"])
        optimizer.load_state_dict(saved["optimizer"])
        for group in optimizer.param_groups:        # the LR the resume was given
            group["lr"] = lr_at(first)
    monitor = TrainMonitor(log_dir, stream=io.StringIO(), resume=resume, **SETTINGS)
    monitor.protect(optimizer, model=model)
    generator = torch.Generator().manual_seed(first)
    for step in range(first, last + 1):
        x, y = torch.randn(16, 8, generator=generator), torch.randn(16, 1, generator=generator)
        monitor.backward(lambda x=x, y=y: nn.functional.mse_loss(model(x), y))
        optimizer.step()
        optimizer.zero_grad()
        found = monitor.observe(step=step)
        for anomaly in found:
            print("anomaly", step, anomaly.kind, ",".join(anomaly.actions))
        if monitor.stop_requested:
            break
    torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict()},
               os.path.join(ckpt_dir, "last.pt" if not resume else "after.pt"))
    monitor.close(exit=False)


def hf(log_dir: str, ckpt_dir: str, first: int, last: int, resume: bool) -> None:
    from transformers import (
        GPT2Config,
        GPT2LMHeadModel,
        Trainer,
        TrainerCallback,
        TrainingArguments,
    )

    from mindwatch.torch import HFCallback

    class Found(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            for anomaly in callback.monitor.anomalies:
                if anomaly.step == state.global_step:
                    print("anomaly", anomaly.step, anomaly.kind, ",".join(anomaly.actions))

    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(n_layer=1, n_head=2, n_embd=32, vocab_size=64,
                                       n_positions=16, bos_token_id=0, eos_token_id=0))
    tokens = torch.randint(0, 64, (last * 4, 16), generator=torch.Generator().manual_seed(1))
    data = [{"input_ids": row, "labels": row} for row in tokens]
    args = TrainingArguments(output_dir=ckpt_dir, per_device_train_batch_size=4,
                             max_steps=last, learning_rate=1.0, report_to=[],
                             save_strategy="steps", save_steps=10, logging_steps=1,
                             use_cpu=True, disable_tqdm=True, dataloader_num_workers=0, seed=0)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1.0)
    # a schedule whose values past step 10 were mistyped (lr_at: the step about to run)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda done: lr_at(done + 1))
    callback = HFCallback(log_dir, stream=io.StringIO(), resume=resume, **SETTINGS)
    trainer = Trainer(model=model, args=args, train_dataset=data, optimizers=(optimizer,
                                                                             schedule),
                      callbacks=[callback, Found()])
    trainer.train(resume_from_checkpoint=os.path.join(ckpt_dir, f"checkpoint-{first - 1}")
                  if resume else None)


def lightning(log_dir: str, ckpt_dir: str, first: int, last: int, resume: bool) -> None:
    import lightning.pytorch as pl
    from torch import nn

    from mindwatch.torch import LightningCallback

    class Regression(pl.LightningModule):
        def __init__(self):
            super().__init__()
            torch.manual_seed(0)
            self.net = nn.Sequential(nn.Linear(8, 16), nn.LayerNorm(16), nn.ReLU(),
                                     nn.Linear(16, 1))

        def training_step(self, batch, batch_idx):
            x, y = batch
            return nn.functional.mse_loss(self.net(x), y)

        def configure_optimizers(self):
            optimizer = torch.optim.AdamW(self.parameters(), lr=1.0)
            # a schedule whose values past step 10 were mistyped (lr_at: the step to run)
            schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda done: lr_at(done + 1))
            return {"optimizer": optimizer,
                    "lr_scheduler": {"scheduler": schedule, "interval": "step"}}

    class Found(pl.Callback):
        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            for anomaly in callback.monitor.anomalies:
                if anomaly.step == trainer.global_step:
                    print("anomaly", anomaly.step, anomaly.kind, ",".join(anomaly.actions))
            if trainer.global_step % 10 == 0:
                trainer.save_checkpoint(os.path.join(ckpt_dir, f"step{trainer.global_step}.ckpt"))

    generator = torch.Generator().manual_seed(1)
    x, y = torch.randn(last * 8, 8, generator=generator), torch.randn(last * 8, 1,
                                                                      generator=generator)
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=8)
    callback = LightningCallback(log_dir, stream=io.StringIO(), resume=resume, **SETTINGS)
    trainer = pl.Trainer(max_steps=last, accelerator="cpu", logger=False,
                         enable_checkpointing=False, enable_progress_bar=False,
                         enable_model_summary=False, callbacks=[callback, Found()])
    trainer.fit(Regression(), loader,
                ckpt_path=os.path.join(ckpt_dir, f"step{first - 1}.ckpt") if resume else None)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("loop", choices=("plain", "hf", "lightning"))
    parser.add_argument("log_dir")
    parser.add_argument("ckpt_dir")
    parser.add_argument("first", type=int)
    parser.add_argument("last", type=int)
    parser.add_argument("--resume", action="store_true")
    args = parser.parse_args()
    run = {"plain": plain, "hf": hf, "lightning": lightning}[args.loop]
    run(args.log_dir, args.ckpt_dir, args.first, args.last, args.resume)


if __name__ == "__main__":
    main()
