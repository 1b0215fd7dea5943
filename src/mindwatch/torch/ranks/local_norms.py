"""Each rank's own gradient norm before DDP reduces the gradients: a communication hook
around DDP's own all-reduce adds each bucket's squared sum, as the bucket leaves, into a
device tensor (no read to the host). The protected step shares the ranks' values in its
verdict's all-reduce, so that a gradient anomaly names the rank it came from
(``origin_rank``)."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook
from torch.nn.parallel import DistributedDataParallel


class LocalNorms:
    """Registered on a ``DistributedDataParallel`` model before its first forward."""

    def __init__(self, model: DistributedDataParallel):
        self._square_sum: torch.Tensor | None = None
        model.register_comm_hook(None, self._hook)

    @classmethod
    def on(cls, model: DistributedDataParallel, notice: Callable[[str], Any]) -> LocalNorms | None:
        """The hook on ``model``, or None (said once) when DDP refuses a second hook: the
        user's own (compression, PowerSGD) keeps its place, and local_grad_norm is left out."""
        try:
            return cls(model)
        except RuntimeError as error:
            notice(f"local_grad_norm is not measured: the DDP model has a communication hook "
                   f"of its own, and DDP takes one ({error})")
            return None

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
