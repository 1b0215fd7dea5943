"""One training run under a trainer, as a user's script runs it, for test_trainer_stops.py:

    python trainer_stop_script.py TRAINER LOG_DIR OUT_DIR [--nan-at N] [--resume REPORT]
        [--settings JSON] [--accumulate N] [--poison-sample K] [--data-seed S]

TRAINER: "hf" (a tiny GPT-2 on random tokens under Hugging Face's Trainer) or "lightning" (a
tiny regression LightningModule). ``--nan-at N``: the loss of the N-th training forward is
NaN (its gradients too). ``--resume REPORT``: the anomaly report (its JSON) of an earlier run
in LOG_DIR, whose resume advice this run follows as printed: the code is run as it is, with
``trainer`` and ``model`` named as the advice names them. mindwatch runs with
``stop_exit_code=42`` and the ``--settings`` given (``report_to``: tests/trackers/pytorch_paths);
``--accumulate N``: HF's ``gradient_accumulation_steps``. ``--poison-sample K``: the loss
of every training forward whose batch holds sample K (found by its content) is NaN: a bad
sample, wherever the data order puts it. ``--data-seed S``: the data shuffled with seed S
(HF's ``data_seed``; Lightning's loader shuffled), another order than the default one.
``{"resume": true}`` in ``--settings``: the run directory resumed by a run started from
scratch (no advice followed). Files in OUT_DIR say how far the
script got: ``ended_after`` (written by a callback listed after mindwatch's, at its train end
or teardown) and ``after_training``
(the line after ``train()``/``fit()``); under HF, ``tracked.jsonl`` holds what a callback
listed before mindwatch's (as ``report_to`` trackers are) was given to log.
"""
from __future__ import annotations

import argparse
import io
import json
import math
import os

import torch

STEPS = 12
BATCH = 4
SETTINGS = {"stop_exit_code": 42, "print_interval": 1000, "hardware_interval_s": None}


def mark(out_dir: str, name: str) -> None:
    with open(os.path.join(out_dir, name), "w") as file:
        file.write("yes\n")


def advice(report: str | None) -> str | None:
    if report is None:
        return None
    with open(report) as file:
        return json.load(file)["resume"]


def run_hf(log_dir: str, out_dir: str, nan_at: int | None, resume: str | None,
           accumulate: int = 1, poison_sample: int | None = None,
           data_seed: int | None = None) -> None:
    from transformers import (
        GPT2Config,
        GPT2LMHeadModel,
        Trainer,
        TrainerCallback,
        TrainingArguments,
    )

    from mindwatch.torch import HFCallback

    class EndedAfter(TrainerCallback):
        def on_train_end(self, args, state, control, **kwargs):
            mark(out_dir, "ended_after")

    class Tracker(TrainerCallback):
        """As a report_to tracker is: before mindwatch's in the list, its on_log called."""

        def on_log(self, args, state, control, logs=None, **kwargs):
            with open(os.path.join(out_dir, "tracked.jsonl"), "a") as file:
                file.write(json.dumps(logs) + "\n")

    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(n_layer=1, n_head=2, n_embd=32, vocab_size=64,
                                       n_positions=16, bos_token_id=0, eos_token_id=0))
    forwards = [0]

    def poison(module, inputs, output):
        if module.training:
            forwards[0] += 1
            if forwards[0] == nan_at:
                output["loss"] = output["loss"] * math.nan
        return output
    if nan_at is not None:
        model.register_forward_hook(poison)     # before the callback's: it sees the NaN
    generator = torch.Generator().manual_seed(1)
    tokens = torch.randint(0, 64, (STEPS * BATCH, 16), generator=generator)

    def poison_sample_(module, args, kwargs, output):
        if module.training and (kwargs["input_ids"] == tokens[poison_sample]).all(1).any():
            output["loss"] = output["loss"] * math.nan
        return output
    if poison_sample is not None:
        model.register_forward_hook(poison_sample_, with_kwargs=True)
    data = [{"input_ids": row, "labels": row} for row in tokens]
    args = TrainingArguments(output_dir=out_dir, per_device_train_batch_size=BATCH,
                             max_steps=STEPS, learning_rate=1e-3, report_to=[],
                             save_strategy="no", logging_steps=1, use_cpu=True,
                             disable_tqdm=True, dataloader_num_workers=0, seed=0,
                             gradient_accumulation_steps=accumulate, data_seed=data_seed)
    callback = HFCallback(log_dir, stream=io.StringIO(), **callback_settings(resume))
    trainer = Trainer(model=model, args=args, train_dataset=data,
                      callbacks=[Tracker(), callback, EndedAfter()])
    code = advice(resume)
    if code is None:
        trainer.train()
    else:
        exec(code, {"trainer": trainer, "model": model})
    mark(out_dir, "after_training")


def run_lightning(log_dir: str, out_dir: str, nan_at: int | None, resume: str | None,
                  poison_sample: int | None = None, data_seed: int | None = None) -> None:
    import lightning.pytorch as pl
    from torch import nn

    from mindwatch.torch import LightningCallback

    class EndedAfter(pl.Callback):
        def teardown(self, trainer, pl_module, stage):
            mark(out_dir, "ended_after")

    class Regression(pl.LightningModule):
        def __init__(self):
            super().__init__()
            torch.manual_seed(0)
            self.net = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 1))
            self.forwards = 0

        def training_step(self, batch, batch_idx):
            x, y = batch
            self.forwards += 1
            loss = nn.functional.mse_loss(self.net(x), y)
            bad = poison_sample is not None and (x == self.x[poison_sample]).all(1).any()
            return loss * math.nan if self.forwards == nan_at or bad else loss

        def configure_optimizers(self):
            return torch.optim.AdamW(self.parameters(), lr=1e-2)

        def train_dataloader(self):
            x = self.x
            order = None if data_seed is None else torch.Generator().manual_seed(data_seed)
            return torch.utils.data.DataLoader(
                torch.utils.data.TensorDataset(x, x[:, :1] * 0.5), batch_size=BATCH,
                shuffle=order is not None, generator=order)

        @property
        def x(self):
            return torch.randn(STEPS * BATCH, 8, generator=torch.Generator().manual_seed(1))

    model = Regression()
    callback = LightningCallback(log_dir, stream=io.StringIO(), **callback_settings(resume))
    trainer = pl.Trainer(max_steps=STEPS, accelerator="cpu", devices=1, logger=False,
                         enable_checkpointing=False, enable_progress_bar=False,
                         enable_model_summary=False, default_root_dir=out_dir,
                         callbacks=[callback, EndedAfter()])
    code = advice(resume)
    if code is None:
        trainer.fit(model)
    else:
        exec(code, {"trainer": trainer, "model": model})
    mark(out_dir, "after_training")


def callback_settings(resume: str | None) -> dict:
    return {**SETTINGS, "resume": resume is not None or SETTINGS.get("resume", False)}


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("trainer", choices=("hf", "lightning"))
    parser.add_argument("log_dir")
    parser.add_argument("out_dir")
    parser.add_argument("--nan-at", type=int)
    parser.add_argument("--resume")
    parser.add_argument("--settings", type=json.loads, default={})
    parser.add_argument("--accumulate", type=int, default=1)
    parser.add_argument("--poison-sample", type=int)
    parser.add_argument("--data-seed", type=int)
    options = parser.parse_args()
    SETTINGS.update(options.settings)
    torch.set_num_threads(1)
    os.makedirs(options.out_dir, exist_ok=True)
    if options.trainer == "hf":
        run_hf(options.log_dir, options.out_dir, options.nan_at, options.resume,
               options.accumulate, options.poison_sample, options.data_seed)
    else:
        run_lightning(options.log_dir, options.out_dir, options.nan_at, options.resume,
                      options.poison_sample, options.data_seed)
