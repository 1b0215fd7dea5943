"""The verdict shared by every rank of a DDP job, on the device: one SUM all-reduce of a vector
holding each rank's squared local norm in its own slot, then a 1 from each rank whose own
step is anomalous and, last, a 1 from each rank whose batch is a known bad one
(reading/batch.py). The update is applied only where the first count is 0, so a loss that is
non-finite or spiking on one rank withholds the update on every rank, and the replicas stay
identical; the second tells every rank that the step was withheld for a known bad batch (its
anomalies then left unsaid on every rank, its replay skipped by all). With NCCL the all-
reduce is queued on the stream: no read to the host."""
from __future__ import annotations

import torch
import torch.distributed as dist

from .distributed import collective_device
from .local_norms import LocalNorms


class SharedVerdict:
    def __init__(self, rank: int, world_size: int, local_norms: LocalNorms | None):
        self.rank, self.world_size = rank, world_size
        self.local_norms = local_norms
        self.device = collective_device()

    def share(self, apply: torch.Tensor, known: bool = False
              ) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor]:
        """(every rank's ``apply``, every rank's local gradient norm or None, how many ranks'
        batches are known bad ones: a float32 0-d tensor)."""
        n = self.world_size
        vector = torch.zeros(n + 2, device=self.device)
        square = self.local_norms.take() if self.local_norms is not None else None
        if square is not None:
            vector[self.rank] = square.to(self.device, non_blocking=True)
        vector[n] = torch.logical_not(apply).float().to(self.device, non_blocking=True)
        vector[n + 1] = float(known)
        dist.all_reduce(vector, op=dist.ReduceOp.SUM)
        shared = (vector[n] < 0.5).to(apply.device, non_blocking=True)
        local = vector[:n].sqrt().to(apply.device) if square is not None else None
        return shared, local, vector[n + 1].to(apply.device)
