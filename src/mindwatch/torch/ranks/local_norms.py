"""Each rank's own gradient norm before DDP reduces the gradients: a communication hook
around DDP's own all-reduce adds each bucket's squared sum, as the bucket leaves, into a
device tensor (no read to the host). The protected step shares the ranks' values in its
verdict's all-reduce, so that a gradient anomaly names the rank it came from
(``origin_rank``).

The same hook sees when this rank hands each bucket to the all-reduce: the last bucket's
call is where the rank enters the step's collective, after its data, forward and backward.
Its host time (``entered``) against the previous step's end is the rank's own work, which
tells a rank slow in its compute (detectors/slow_cause.py). On the CPU (gloo) the hook runs
once the bucket's gradients are computed; under CUDA it runs when they are *queued* on the
stream, ahead of the device, so a host time says nothing of the device's speed: ``entered``
is None there (the device's time would need a CUDA event recorded in the hook and read at
the step's end; docs/scale.md#slow-ranks-by-cause)."""
from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import torch
from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook
from torch.nn.parallel import DistributedDataParallel


class LocalNorms:
    """Registered on a ``DistributedDataParallel`` model before its first forward."""

    def __init__(self, model: DistributedDataParallel,
                 clock: Callable[[], float] = time.perf_counter):
        self._square_sum: torch.Tensor | None = None
        self._clock = clock
        # host time of this step's last bucket handed to the all-reduce (CPU tensors only)
        self._entered: float | None = None
        model.register_comm_hook(None, self._hook)

    @classmethod
    def on(cls, model: DistributedDataParallel, notice: Callable[[str], Any],
           clock: Callable[[], float] = time.perf_counter) -> LocalNorms | None:
        """The hook on ``model``, or None (said once) when DDP refuses a second hook: the
        user's own (compression, PowerSGD) keeps its place, and local_grad_norm is left out."""
        try:
            return cls(model, clock)
        except RuntimeError as error:
            notice(f"local_grad_norm is not measured: the DDP model has a communication hook "
                   f"of its own, and DDP takes one ({error})")
            return None

    # Left unannotated: DDP checks a hook's annotations, and this module's are strings.
    def _hook(self, state, bucket):
        values = bucket.buffer()
        self._entered = None if values.is_cuda else self._clock()
        square = values.float().square().sum()
        self._square_sum = square if self._square_sum is None else self._square_sum + square
        return allreduce_hook(None, bucket)

    def take(self) -> torch.Tensor | None:
        """This step's squared local norm (None: no bucket was reduced), reset."""
        value, self._square_sum = self._square_sum, None
        return value

    def work_since(self, mark: float | None, data_time_s: float | None) -> float | None:
        """Seconds from ``mark`` (the previous step's end, on the hook's clock) to this
        step's last bucket, less ``data_time_s`` (its input's part, judged by the data rule);
        None when no bucket was timed since (no mark, CUDA, a step with no reduction), reset."""
        entered, self._entered = self._entered, None
        if entered is None or mark is None or entered < mark:
            return None
        return max(entered - mark - (data_time_s or 0.0), 0.0)
