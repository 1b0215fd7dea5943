"""``HFCallback``: mindwatch in Hugging Face's ``transformers.Trainer``.

``callbacks=[HFCallback("runs/exp1")]`` is the whole change. At train begin the callback
protects the Trainer's optimizer (the torch optimizer inside Accelerate's wrapper) with its
LR scheduler, and takes over clipping: the Trainer's ``max_grad_norm`` clips after mindwatch
has measured the pre-clip norm and judged the step, so the Trainer is set to clip nothing
until train end (its logged ``grad_norm`` is the pre-clip norm, as before). The loss is
the model's own (``outputs.loss``, the mean of a step's micro-batches), taken by a forward
hook in training mode; a ``compute_loss`` outside the model leaves the loss unrecorded and
unjudged (the norm still is). A step's anomaly that stops sets ``should_training_stop``.
"""
from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import torch
from transformers import TrainerCallback

from ..callback import TrainMonitor


class HFCallback(TrainerCallback):
    """Args: ``log_dir`` and any ``MonitorSettings`` field, as ``TrainMonitor``."""

    def __init__(self, log_dir: str, *, stream=None, clock=None, **settings: Any):
        self.train_monitor = TrainMonitor(log_dir, stream=stream, clock=clock, **settings)
        self.train_monitor.replay_unavailable = (
            "Hugging Face's Trainer computes the step's batches itself (replay needs a plain "
            "loop whose monitor.backward is given a closure)")
        self._hook: Any = None
        self._max_grad_norm: float | None = None
        self._args: Any = None

    @property
    def monitor(self):
        return self.train_monitor.monitor

    def on_train_begin(self, args, state, control, model=None, optimizer=None,
                       lr_scheduler=None, **kwargs):
        clip = args.max_grad_norm if args.max_grad_norm and args.max_grad_norm > 0 else None
        self._args, self._max_grad_norm = args, args.max_grad_norm
        args.max_grad_norm = 0.0
        self.train_monitor.protect(
            _torch_optimizer(optimizer), model=model, clip_grad_norm=clip,
            schedulers=[lr_scheduler] if lr_scheduler is not None else [])
        self._hook = model.register_forward_hook(self._take_loss)
        self.monitor.start(total_steps=state.max_steps or None)
        self.monitor.rewinds.begin(state.global_step)

    def _take_loss(self, module: torch.nn.Module, inputs: Any, output: Any) -> None:
        if not module.training or self.train_monitor.train_step is None:
            return
        loss = output.get("loss") if isinstance(output, Mapping) else getattr(output, "loss",
                                                                               None)
        if isinstance(loss, torch.Tensor) and loss.numel() == 1:
            self.train_monitor.train_step.add_loss(loss)

    def on_step_end(self, args, state, control, **kwargs):
        found = self.train_monitor.observe(
            step=state.global_step, epoch=_epoch(state.epoch),
            batch_size=args.per_device_train_batch_size * args.gradient_accumulation_steps)
        if any(anomaly.stops for anomaly in found) or self.monitor.stop_requested:
            control.should_training_stop = True
        return control

    def on_train_end(self, args, state, control, **kwargs):
        self._restore()
        self.train_monitor.close()

    def _restore(self) -> None:
        if self._hook is not None:
            self._hook.remove()
            self._hook = None
        if self._args is not None:
            self._args.max_grad_norm = self._max_grad_norm
            self._args = None


def _torch_optimizer(optimizer: Any) -> torch.optim.Optimizer:
    """The torch optimizer inside Accelerate's ``AcceleratedOptimizer`` (whose step calls
    the inner one's, whose hooks run)."""
    while hasattr(optimizer, "optimizer") and isinstance(optimizer.optimizer,
                                                         torch.optim.Optimizer):
        optimizer = optimizer.optimizer
    return optimizer


def _epoch(progress: float | None) -> int | None:
    """The Trainer's fractional epoch after a step (1.0: the first epoch's last step) as a
    1-based epoch."""
    if progress is None:
        return None
    return max(math.ceil(progress - 1e-9), 1)
