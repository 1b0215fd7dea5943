"""One rank of Lightning under torchrun (DDP, gloo, CPU), for test_ddp.py:
``torchrun --nproc_per_node=2 lightning_ddp_trainer.py LOG_DIR OUTPUT_DIR``. Rank 1's loss
is NaN at its ``BAD_STEP``-th training forward, rank 0's never is."""
import io
import os
import sys

import lightning.pytorch as pl
import torch

from mindwatch.torch import LightningCallback
from torch_conformance import BAD_STEP, SETTINGS, STEPS, Pairs, PoisonNet


class Module(pl.LightningModule):
    def __init__(self, poison):
        super().__init__()
        self.net = PoisonNet(poison)

    def training_step(self, batch, batch_idx):
        return self.net(**batch)["loss"]

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.05)


def main(log_dir: str, output_dir: str) -> None:
    rank = int(os.environ["RANK"])
    module = Module("nan" if rank == 1 else None)
    callback = LightningCallback(log_dir, stream=io.StringIO(), **SETTINGS)
    trainer = pl.Trainer(max_steps=STEPS, accelerator="cpu", devices=2, strategy="ddp",
                         logger=False, enable_checkpointing=False, enable_progress_bar=False,
                         enable_model_summary=False, gradient_clip_val=1.0,
                         default_root_dir=output_dir, callbacks=[callback])
    trainer.fit(module, torch.utils.data.DataLoader(Pairs(), batch_size=4))
    torch.save({name: p.detach() for name, p in module.net.named_parameters()},
               f"{log_dir}/weights_rank{rank}.pt")
    assert callback.monitor.last_step == BAD_STEP, callback.monitor.last_step


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
