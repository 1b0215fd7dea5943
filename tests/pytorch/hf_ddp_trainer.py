"""One rank of Hugging Face's Trainer under torchrun (DDP, gloo, CPU), for test_ddp.py:
``torchrun --nproc_per_node=2 hf_ddp_trainer.py LOG_DIR OUTPUT_DIR``. Rank 1's loss is NaN
at its ``BAD_STEP``-th training forward, rank 0's never is."""
import io
import os
import sys

import torch
from transformers import Trainer, TrainingArguments

from mindwatch.torch import HFCallback
from torch_conformance import BAD_STEP, SETTINGS, STEPS, Pairs, PoisonNet


def main(log_dir: str, output_dir: str) -> None:
    rank = int(os.environ["RANK"])
    model = PoisonNet("nan" if rank == 1 else None)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    args = TrainingArguments(output_dir=output_dir, per_device_train_batch_size=4,
                             max_steps=STEPS, max_grad_norm=1.0, report_to=[],
                             save_strategy="no", logging_strategy="no", use_cpu=True,
                             disable_tqdm=True, dataloader_num_workers=0, seed=0,
                             ddp_backend="gloo")
    callback = HFCallback(log_dir, stream=io.StringIO(), **SETTINGS)
    Trainer(model=model, args=args, train_dataset=Pairs(), optimizers=(optimizer, None),
            callbacks=[callback]).train()
    torch.save({name: p.detach() for name, p in model.named_parameters()},
               f"{log_dir}/weights_rank{rank}.pt")
    assert callback.monitor.last_step == BAD_STEP, callback.monitor.last_step


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
