"""``LightningCallback``: mindwatch in PyTorch Lightning's ``Trainer``.

``Trainer(callbacks=[LightningCallback("runs/exp1")])`` is the whole change. Lightning calls
``optimizer.step(closure)``: the gradients are computed inside the step, after the
optimizer's pre-hook. So the step is measured and judged in ``on_before_optimizer_step``,
which Lightning runs inside the closure once backward is done and before its own
``gradient_clip_val`` clips: the norm is the pre-clip norm; the update is withheld by the
optimizer's post-hook as in a plain loop. The loss is the one ``training_step`` returned
(``on_before_backward``, times ``accumulate_grad_batches``, which Lightning divided it by).
One optimizer is protected: the first (automatic optimization has one).
"""
from __future__ import annotations

from typing import Any

from lightning.pytorch import Callback
from torch.nn.parallel import DistributedDataParallel

from ..callback import TrainMonitor


class LightningCallback(Callback):
    """Args: ``log_dir`` and any ``MonitorSettings`` field, as ``TrainMonitor``."""

    def __init__(self, log_dir: str, *, stream=None, clock=None, **settings: Any):
        self.train_monitor = TrainMonitor(log_dir, stream=stream, clock=clock, **settings)
        self.train_monitor.replay_unavailable = (
            "Lightning computes the step's batches itself (replay needs a plain "
            "loop whose monitor.backward is given a closure)")
        self._observed = 0

    @property
    def monitor(self):
        return self.train_monitor.monitor

    def on_train_start(self, trainer, pl_module) -> None:
        if not trainer.optimizers:
            return
        schedulers = [config.scheduler for config in trainer.lr_scheduler_configs]
        # under DDP the strategy's wrapper, whose communication hook measures each rank's
        # own gradient norm (local_grad_norm); protect unwraps it for checkpoints
        wrapped = getattr(trainer.strategy, "model", None)
        model = wrapped if isinstance(wrapped, DistributedDataParallel) else pl_module
        self.train_monitor.protect(trainer.optimizers[0], model=model, schedulers=schedulers)
        step = self.train_monitor.train_step
        assert step is not None                   # protect() made it
        step.in_closure = True
        if len(trainer.optimizers) > 1:
            self.monitor.notice(f"{len(trainer.optimizers)} optimizers: mindwatch protects "
                                "the first")
        total = trainer.estimated_stepping_batches
        self.monitor.start(total_steps=int(total) if total not in (None, float("inf"))
                           else None)
        self._observed = trainer.global_step
        self.monitor.rewinds.begin(trainer.global_step)

    def on_before_backward(self, trainer, pl_module, loss) -> None:
        step = self.train_monitor.train_step
        if step is not None and pl_module.automatic_optimization:
            step.add_loss(loss.detach() * trainer.accumulate_grad_batches)

    def on_before_optimizer_step(self, trainer, pl_module, optimizer) -> None:
        step = self.train_monitor.train_step
        if step is not None and getattr(optimizer, "optimizer", optimizer) is step.optimizer:
            step.measure()

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if trainer.global_step <= self._observed:       # accumulating: no step yet
            return
        self._observed = trainer.global_step
        found = self.train_monitor.observe(step=trainer.global_step,
                                           epoch=trainer.current_epoch + 1)
        if any(anomaly.stops for anomaly in found) or self.monitor.stop_requested:
            trainer.should_stop = True

    def on_train_end(self, trainer, pl_module) -> None:
        self.train_monitor.close()

    def on_exception(self, trainer, pl_module, exception: BaseException) -> None:
        self.monitor.close(reason="error", error=f"{type(exception).__name__}: {exception}")
