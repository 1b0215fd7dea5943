"""Each rank's own gradient norm before DDP reduces the gradients: a communication hook
around DDP's own all-reduce adds each bucket's squared sum, as the bucket leaves, into a
device tensor (no read to the host). The protected step shares the ranks' values in its
verdict's all-reduce, so that a gradient anomaly names the rank it came from
(``origin_rank``)."""
from __future__ import annotations

import torch
from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook
from torch.nn.parallel import DistributedDataParallel


class LocalNorms:
    """Registered on a ``DistributedDataParallel`` model before its first forward."""

    def __init__(self, model: DistributedDataParallel):
        self._square_sum: torch.Tensor | None = None
        model.register_comm_hook(None, self._hook)

    # Left unannotated: DDP checks a hook's annotations, and this module's are strings.
    def _hook(self, state, bucket):
        values = bucket.buffer()
        square = values.float().square().sum()
        self._square_sum = square if self._square_sum is None else self._square_sum + square
        return allreduce_hook(None, bucket)

    def take(self) -> torch.Tensor | None:
        """This step's squared local norm (None: no bucket was reduced), reset."""
        value, self._square_sum = self._square_sum, None
        return value
