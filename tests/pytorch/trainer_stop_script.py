"""One training run under a trainer, as a user's script runs it, for test_trainer_stops.py:

    python trainer_stop_script.py TRAINER LOG_DIR OUT_DIR [--nan-at N] [--resume REPORT]
        [--settings JSON] [--accumulate N] [--poison-sample K ...] [--data-seed S]
        [--max-steps N] [--save-steps N] [--resume-from CHECKPOINT] [--ignore-data-skip]
        [--bucket-seed S]

TRAINER: "hf" (a tiny GPT-2 on random tokens under Hugging Face's Trainer) or "lightning" (a
tiny regression LightningModule). ``--nan-at N``: the loss of the N-th training forward is
NaN (its gradients too). ``--resume REPORT``: the anomaly report (its JSON) of an earlier run
in LOG_DIR, whose resume advice this run follows as printed: the code is run as it is, with
``trainer`` and ``model`` named as the advice names them. mindwatch runs with
``stop_exit_code=42`` and the ``--settings`` given (``report_to``: tests/trackers/pytorch_paths);
``--accumulate N``: HF's ``gradient_accumulation_steps``. ``--poison-sample K`` (repeated:
several): the loss of every training forward whose batch holds sample K (found by its
content) is NaN: a bad sample, wherever the data order puts it. ``--data-seed S``: the data
shuffled with seed S (HF's ``data_seed``; Lightning's loader shuffled), another order than
the default one. Each training forward's samples, found by their content (the dataset's
indices, in the batch's order), go to ``forwards<N>.jsonl`` in OUT_DIR (N: this script's
N-th run there), one line each: the truth the loaders' indices are checked against.
HF only: ``--max-steps N`` (default 12, an epoch), ``--save-steps N`` (the Trainer's
``checkpoint-<step>`` every N steps), ``--resume-from CHECKPOINT``
(``trainer.train(resume_from_checkpoint=...)``), ``--ignore-data-skip`` (the resumed epoch
starts over rather than skipping the batches trained on). Lightning only: ``--bucket-seed S``:
a batch sampler that deals 12 fixed batches (their samples fixed, as a bucketing sampler's)
in an order, and each one's samples in an order, drawn with seed S.
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


def forwards_log(out_dir: str, suffix: str = ""):
    """Appends one training forward's sample indices to this run's
    ``forwards<N><suffix>.jsonl`` (``suffix``: a rank's, ``_rank<R>``)."""
    runs = sum(name.startswith("forwards") and name.endswith(f"{suffix}.jsonl")
               for name in os.listdir(out_dir))
    path = os.path.join(out_dir, f"forwards{runs + 1}{suffix}.jsonl")
    open(path, "w").close()

    def log(rows: torch.Tensor, data: torch.Tensor) -> None:
        found = (rows[:, None, :] == data[None]).all(-1).nonzero()[:, 1].tolist()
        with open(path, "a") as file:
            file.write(json.dumps(found) + "\n")
    return log


def holds(rows: torch.Tensor, data: torch.Tensor, samples: list[int] | None) -> bool:
    return any(bool((rows == data[k]).all(1).any()) for k in samples or ())


def advice(report: str | None) -> str | None:
    if report is None:
        return None
    with open(report) as file:
        return json.load(file)["resume"]


def run_hf(log_dir: str, out_dir: str, nan_at: int | None, resume: str | None,
           accumulate: int = 1, poison_sample: list[int] | None = None,
           data_seed: int | None = None, max_steps: int = STEPS, save_steps: int | None = None,
           resume_from: str | None = None, ignore_data_skip: bool = False) -> None:
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

    log = forwards_log(out_dir)

    def poison_sample_(module, args, kwargs, output):
        if module.training:
            log(kwargs["input_ids"], tokens)
            if holds(kwargs["input_ids"], tokens, poison_sample):
                output["loss"] = output["loss"] * math.nan
        return output
    model.register_forward_hook(poison_sample_, with_kwargs=True)
    data = [{"input_ids": row, "labels": row} for row in tokens]
    saving = {"save_strategy": "no"} if save_steps is None else {
        "save_strategy": "steps", "save_steps": save_steps}
    args = TrainingArguments(output_dir=out_dir, per_device_train_batch_size=BATCH,
                             max_steps=max_steps, learning_rate=1e-3, report_to=[],
                             logging_steps=1, use_cpu=True, ignore_data_skip=ignore_data_skip,
                             disable_tqdm=True, dataloader_num_workers=0, seed=0,
                             gradient_accumulation_steps=accumulate, data_seed=data_seed,
                             **saving)
    callback = HFCallback(log_dir, stream=io.StringIO(), **callback_settings(resume))
    trainer = Trainer(model=model, args=args, train_dataset=data,
                      callbacks=[Tracker(), callback, EndedAfter()])
    code = advice(resume)
    if code is None:
        trainer.train(resume_from_checkpoint=resume_from)
    else:
        exec(code, {"trainer": trainer, "model": model})
    mark(out_dir, "after_training")


class Buckets(torch.utils.data.Sampler):
    """Fixed batches of ``BATCH`` samples (a permutation of the data cut in batches, drawn
    with ``fixed_seed``, as a bucketing sampler groups samples of one length), dealt in an
    order and each one's samples in an order drawn with ``seed``: a new order each epoch.
    Under data parallelism (``ranks``), rank ``rank``'s share: every ``ranks``-th batch."""

    def __init__(self, size: int, seed: int, *, rank: int = 0, ranks: int = 1,
                 fixed_seed: int = 7):
        fixed = torch.randperm(size, generator=torch.Generator().manual_seed(fixed_seed))
        self.batches = [fixed[i:i + BATCH].tolist()
                        for i in range(0, size, BATCH)][rank::ranks]
        self.generator = torch.Generator().manual_seed(seed)

    def __iter__(self):
        for b in torch.randperm(len(self.batches), generator=self.generator).tolist():
            order = torch.randperm(BATCH, generator=self.generator).tolist()
            yield [self.batches[b][i] for i in order]

    def __len__(self) -> int:
        return len(self.batches)


def run_lightning(log_dir: str, out_dir: str, nan_at: int | None, resume: str | None,
                  poison_sample: list[int] | None = None, data_seed: int | None = None,
                  bucket_seed: int | None = None) -> None:
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
            self.log_forward = forwards_log(out_dir)

        def training_step(self, batch, batch_idx):
            x, y = batch
            self.forwards += 1
            self.log_forward(x, self.x)
            loss = nn.functional.mse_loss(self.net(x), y)
            bad = holds(x, self.x, poison_sample)
            return loss * math.nan if self.forwards == nan_at or bad else loss

        def configure_optimizers(self):
            return torch.optim.AdamW(self.parameters(), lr=1e-2)

        def train_dataloader(self):
            x = self.x
            data = torch.utils.data.TensorDataset(x, x[:, :1] * 0.5)
            if bucket_seed is not None:
                return torch.utils.data.DataLoader(data, batch_sampler=Buckets(len(x),
                                                                               bucket_seed))
            order = None if data_seed is None else torch.Generator().manual_seed(data_seed)
            return torch.utils.data.DataLoader(data, batch_size=BATCH,
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
    parser.add_argument("--poison-sample", type=int, action="append")
    parser.add_argument("--data-seed", type=int)
    parser.add_argument("--max-steps", type=int, default=STEPS)
    parser.add_argument("--save-steps", type=int)
    parser.add_argument("--resume-from")
    parser.add_argument("--ignore-data-skip", action="store_true")
    parser.add_argument("--bucket-seed", type=int)
    options = parser.parse_args()
    SETTINGS.update(options.settings)
    torch.set_num_threads(1)
    os.makedirs(options.out_dir, exist_ok=True)
    if options.trainer == "hf":
        run_hf(options.log_dir, options.out_dir, options.nan_at, options.resume,
               options.accumulate, options.poison_sample, options.data_seed,
               options.max_steps, options.save_steps, options.resume_from,
               options.ignore_data_skip)
    else:
        run_lightning(options.log_dir, options.out_dir, options.nan_at, options.resume,
                      options.poison_sample, options.data_seed, options.bucket_seed)
