"""One rank of a trainer's DDP job under torchrun (gloo, CPU) whose data holds poisoned
samples, for test_ddp.py's bad-batch tests (issue #46):

    torchrun --nproc_per_node=2 bad_batch_ddp.py TRAINER LOG_DIR OUT_DIR
        [--poison-sample K ...] [--settings JSON] [--max-steps N] [--save-steps N]
        [--resume-from CHECKPOINT] [--ignore-data-skip] [--bucket-seed S]

As trainer_stop_script.py's runs, on two ranks: TRAINER "hf" (a tiny GPT-2 on random
tokens under Hugging Face's Trainer, its DDP over gloo, batches of ``BATCH`` a rank from
accelerate's sharding of the seeded sampler's batches) or "lightning" (a tiny regression
under the "ddp" strategy, each rank's own fixed batches dealt in an order drawn with
``--bucket-seed``: ``rank_buckets``). The loss of every training forward whose batch holds a
sample ``--poison-sample`` names (found by its content) is NaN. mindwatch runs with
``stop_exit_code=42`` and the ``--settings`` given (``{"resume": true}``: the run directory
resumed). HF only: ``--max-steps`` (default 16), ``--save-steps`` (``checkpoint-<step>``
every N steps), ``--resume-from`` (``trainer.train(resume_from_checkpoint=...)``) and
``--ignore-data-skip`` (the resumed epoch starts over).

Each rank writes, in OUT_DIR, each training forward's samples (found by their content: the
dataset's indices, in the batch's order) to ``forwards<N>_rank<R>.jsonl`` (N: this script's
N-th run there), and, in LOG_DIR, its weights at the end (``weights_rank<R>.pt``, from a
callback after mindwatch's: written before a stop's exit too).
"""
from __future__ import annotations

import argparse
import io
import json
import math
import os

import torch
from trainer_stop_script import SETTINGS, Buckets, forwards_log, holds

BATCH = 4
SAMPLES = 2 * 12 * BATCH         # an epoch: 12 steps of the two ranks' batches
FIXED_SEED = 7                  # rank_buckets' fixed batches


def save_weights(model: torch.nn.Module, log_dir: str, rank: int) -> None:
    torch.save({name: p.detach().clone() for name, p in model.named_parameters()},
               os.path.join(log_dir, f"weights_rank{rank}.pt"))


def run_hf(log_dir: str, out_dir: str, rank: int, options: argparse.Namespace) -> None:
    from transformers import (
        GPT2Config,
        GPT2LMHeadModel,
        Trainer,
        TrainerCallback,
        TrainingArguments,
    )

    from mindwatch.torch import HFCallback

    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(n_layer=1, n_head=2, n_embd=32, vocab_size=64,
                                       n_positions=16, bos_token_id=0, eos_token_id=0))
    tokens = torch.randint(0, 64, (SAMPLES, 16), generator=torch.Generator().manual_seed(1))
    log = forwards_log(out_dir, f"_rank{rank}")

    def poison(module, args, kwargs, output):
        if module.training:
            log(kwargs["input_ids"], tokens)
            if holds(kwargs["input_ids"], tokens, options.poison_sample):
                output["loss"] = output["loss"] * math.nan
        return output
    model.register_forward_hook(poison, with_kwargs=True)

    class Weights(TrainerCallback):
        def on_train_end(self, args, state, control, model=None, **kwargs):
            save_weights(model, log_dir, rank)

    saving = {"save_strategy": "no"} if options.save_steps is None else {
        "save_strategy": "steps", "save_steps": options.save_steps}
    args = TrainingArguments(output_dir=out_dir, per_device_train_batch_size=BATCH,
                             max_steps=options.max_steps, learning_rate=1e-3, report_to=[],
                             logging_strategy="no", use_cpu=True, disable_tqdm=True,
                             ignore_data_skip=options.ignore_data_skip, ddp_backend="gloo",
                             dataloader_num_workers=0, seed=0, **saving)
    callback = HFCallback(log_dir, stream=io.StringIO(), **SETTINGS)
    data = [{"input_ids": row, "labels": row} for row in tokens]
    trainer = Trainer(model=model, args=args, train_dataset=data,
                      callbacks=[callback, Weights()])
    trainer.train(resume_from_checkpoint=options.resume_from)


def rank_buckets(rank: int, seed: int) -> Buckets:
    """This rank's share of fixed batches (trainer_stop_script's ``Buckets``: a permutation
    of the data cut in batches, the rank's every other one), dealt in an order and each
    one's samples in an order drawn with ``seed``."""
    return Buckets(SAMPLES, seed, rank=rank, ranks=2, fixed_seed=FIXED_SEED)


def run_lightning(log_dir: str, out_dir: str, rank: int, options: argparse.Namespace) -> None:
    import lightning.pytorch as pl
    from torch import nn

    from mindwatch.torch import LightningCallback

    x = torch.randn(SAMPLES, 8, generator=torch.Generator().manual_seed(1))

    class Regression(pl.LightningModule):
        def __init__(self):
            super().__init__()
            torch.manual_seed(0)
            self.net = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 1))
            self.log_forward = forwards_log(out_dir, f"_rank{rank}")

        def training_step(self, batch, batch_idx):
            rows, y = batch
            self.log_forward(rows, x)
            loss = nn.functional.mse_loss(self.net(rows), y)
            return loss * math.nan if holds(rows, x, options.poison_sample) else loss

        def configure_optimizers(self):
            return torch.optim.AdamW(self.parameters(), lr=1e-2)

        def train_dataloader(self):
            data = torch.utils.data.TensorDataset(x, x[:, :1] * 0.5)
            return torch.utils.data.DataLoader(
                data, batch_sampler=rank_buckets(rank, options.bucket_seed))

    class Weights(pl.Callback):
        def teardown(self, trainer, pl_module, stage):
            save_weights(pl_module.net, log_dir, rank)

    callback = LightningCallback(log_dir, stream=io.StringIO(), **SETTINGS)
    # use_distributed_sampler=False: each rank's batches are rank_buckets' own; a
    # DistributedSampler in its place would deal the samples out anew
    trainer = pl.Trainer(max_steps=12, accelerator="cpu", devices=2, strategy="ddp",
                         use_distributed_sampler=False, logger=False,
                         enable_checkpointing=False, enable_progress_bar=False,
                         enable_model_summary=False, default_root_dir=out_dir,
                         callbacks=[callback, Weights()])
    trainer.fit(Regression())


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("trainer", choices=("hf", "lightning"))
    parser.add_argument("log_dir")
    parser.add_argument("out_dir")
    parser.add_argument("--poison-sample", type=int, action="append")
    parser.add_argument("--settings", type=json.loads, default={})
    parser.add_argument("--max-steps", type=int, default=16)
    parser.add_argument("--save-steps", type=int)
    parser.add_argument("--resume-from")
    parser.add_argument("--ignore-data-skip", action="store_true")
    parser.add_argument("--bucket-seed", type=int, default=0)
    given = parser.parse_args()
    SETTINGS.update(given.settings)
    torch.set_num_threads(1)
    os.makedirs(given.out_dir, exist_ok=True)
    run = run_hf if given.trainer == "hf" else run_lightning
    run(given.log_dir, given.out_dir, int(os.environ["RANK"]), given)
