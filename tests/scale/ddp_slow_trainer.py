"""One rank of the scale tests' slow-rank torchrun job (not a test module): DDP over gloo on
the CPU, ``protect(model=ddp)`` (the communication hook that times where each rank enters the
gradient all-reduce), one rank slower in its compute.

    torchrun --nproc_per_node=N ddp_slow_trainer.py LOG_DIR SLOW_RANK

Rank SLOW_RANK's forward multiplies an EXTRA x EXTRA matrix REPEAT times more (its result
added times zero): more work before its gradients reach the all-reduce.
"""
import io
import sys

import torch
import torch.distributed as dist
from torch import nn

from mindwatch.torch import TrainMonitor

STEPS = 90
EXTRA, REPEAT = 256, 8


class Net(nn.Module):
    def __init__(self, slow):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(8, 64), nn.Tanh(), nn.Linear(64, 64), nn.Tanh(),
                                  nn.Linear(64, 1))
        self.slow = slow
        self.register_buffer("m", torch.randn(EXTRA, EXTRA) / EXTRA)

    def forward(self, x):
        out = self.body(x)
        if self.slow:
            w = self.m
            for _ in range(REPEAT):
                w = w @ self.m
            out = out + 0.0 * w[0, 0]
        return out


def main(log_dir: str, slow_rank: str) -> None:
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    ddp = nn.parallel.DistributedDataParallel(Net(rank == int(slow_rank)))
    monitor = TrainMonitor(log_dir, stream=io.StringIO(), hardware_interval_s=None)
    optimizer = monitor.protect(torch.optim.AdamW(ddp.parameters(), lr=1e-3), model=ddp)
    generator = torch.Generator().manual_seed(100 + rank)       # each rank its own data
    for step in range(1, STEPS + 1):
        x = torch.randn(32, 8, generator=generator)
        y = x[:, :1] + 0.1 * torch.randn(32, 1, generator=generator)
        monitor.backward(lambda x=x, y=y: nn.functional.mse_loss(ddp(x), y))
        optimizer.step()
        optimizer.zero_grad()
        monitor.observe(step=step)
    dist.destroy_process_group()
    monitor.close()


if __name__ == "__main__":
    torch.set_num_threads(1)
    main(sys.argv[1], sys.argv[2])
