"""One rank of the scale tests' PyTorch hang jobs (not a test module): DDP over gloo under
torchrun, one rank made to hold the others (test_torchrun_faults.py).

    torchrun ... ddp_fault_trainer.py LOG_DIR FAULT RANK STEP

FAULT, on rank RANK only: ``loader`` (its DataLoader's dataset sleeps on the batch of step
STEP: the training thread waits in the DataLoader) or ``user`` (its own code sleeps before
step STEP). Every rank aborts on the hang (``hang_timeout_s`` HANG_TIMEOUT_S).
"""
import io
import sys
import time

import torch
import torch.distributed as dist
from torch import nn
from torch.utils.data import DataLoader, Dataset

from mindwatch.torch import TrainMonitor

STEPS = 30
HANG_TIMEOUT_S = 6.0
STUCK_S = 600.0


class Batches(Dataset):
    """Sample i of a rank's data; sample ``stuck_at`` sleeps."""

    def __init__(self, rank, stuck_at):
        generator = torch.Generator().manual_seed(100 + rank)
        self.x = torch.randn(STEPS * 16, 8, generator=generator)
        self.y = self.x[:, :1] + torch.randn(STEPS * 16, 1, generator=generator)
        self.stuck_at = stuck_at

    def __len__(self):
        return len(self.x)

    def __getitem__(self, index):
        if index == self.stuck_at:
            time.sleep(STUCK_S)
        return self.x[index], self.y[index]


def user_code_that_blocks():
    time.sleep(STUCK_S)


def main(log_dir, fault, fault_rank, fault_step):
    dist.init_process_group("gloo")
    rank, fault_step = dist.get_rank(), int(fault_step)
    faulty = rank == int(fault_rank)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 1))
    ddp = nn.parallel.DistributedDataParallel(model)
    monitor = TrainMonitor(log_dir, stream=io.StringIO(), hardware_interval_s=None,
                           hang_timeout_s=HANG_TIMEOUT_S, on_anomaly={"hang": "abort"})
    optimizer = monitor.protect(torch.optim.AdamW(ddp.parameters(), lr=1e-2), model=ddp)
    stuck_at = (fault_step - 1) * 16 if faulty and fault == "loader" else None
    loader = DataLoader(Batches(rank, stuck_at), batch_size=16, shuffle=False)
    for step, (x, y) in enumerate(loader, start=1):
        if faulty and fault == "user" and step == fault_step:
            user_code_that_blocks()
        monitor.backward(lambda x=x, y=y: nn.functional.mse_loss(ddp(x), y))
        optimizer.step()
        optimizer.zero_grad()
        monitor.observe(step=step)
    monitor.close()
    dist.destroy_process_group()


if __name__ == "__main__":
    main(*sys.argv[1:5])
