"""``LightningCallback``: mindwatch in PyTorch Lightning's ``Trainer``.

``Trainer(callbacks=[LightningCallback("runs/exp1")])`` is the whole change. Lightning calls
``optimizer.step(closure)``: the gradients are computed inside the step, after the
optimizer's pre-hook. So the step is measured and judged in ``on_before_optimizer_step``,
which Lightning runs inside the closure once backward is done and before its own
``gradient_clip_val`` clips: the norm is the pre-clip norm; the update is withheld by the
optimizer's post-hook as in a plain loop. The loss is what Lightning backpropagates
(``on_before_backward``): ``training_step``'s loss divided by ``accumulate_grad_batches``,
summed over the step's batches, i.e. their mean over a full accumulation window.
One optimizer is protected: the first (automatic optimization has one). A step's samples
(for samples/s) are the batches Lightning hands the step, each counted by the first dimension
of the first tensor found in it (reading/samples.py).

A stop sets ``trainer.should_stop``. One that asks for a checkpoint has Lightning write its
own of the step too (``trainer.save_checkpoint``, beside mindwatch's in ``checkpoints/``, as
``lightning_step<N>.ckpt``), which the anomaly report's resume advice names for
``trainer.fit(..., ckpt_path=...)``: the step's update was withheld, so it holds the state
before the step, and Lightning goes on at the next step. Under ``stop_exit_code`` the process
exits from the ``teardown`` of "fit", after Lightning's train end, its own teardown and
``on_fit_end``, and after the callbacks after this one have torn down (stopping.py):
Lightning then finalises its loggers as "failed", and the code after ``trainer.fit`` does not
run.

A step's batch is named by its samples' indices as its training ``DataLoader`` fetched them
(reading/sample_indices.py). Lightning makes the epoch's iterator, and fetches its first
batch, before ``on_train_start``; so the loader is watched as Lightning hands it to its
strategy (``process_dataloader``, wrapped on the trainer's strategy from ``setup`` to
``teardown``), after its own re-instantiation with a ``DistributedSampler`` under DDP, and
again at each reload (``reload_dataloaders_every_n_epochs``). With several training loaders
(a ``CombinedLoader``), whose batches come together, the indices are unknown (null).
"""
from __future__ import annotations

import os
from functools import partial
from typing import Any

from lightning.pytorch import Callback
from torch.nn.parallel import DistributedDataParallel

from ...decisions.exit_status import after_own, exit_after
from ..callback import TrainMonitor
from ..checkpoints.training_state import LIGHTNING
from ..reading.samples import samples_in
from .stopping import asks_checkpoint


class LightningCallback(Callback):
    """Args: ``log_dir`` and any ``MonitorSettings`` field, as ``TrainMonitor``."""

    def __init__(self, log_dir: str, *, stream=None, clock=None, **settings: Any):
        self.train_monitor = TrainMonitor(log_dir, stream=stream, clock=clock, **settings)
        self.train_monitor.replay_unavailable = (
            "Lightning computes the step's batches itself (replay needs a plain "
            "loop whose monitor.backward is given a closure)")
        self._observed = 0
        self._samples: int | None = 0         # the batches' samples since the last step
        self._training = self.train_monitor.training_state
        self._training.trainer = LIGHTNING
        self._strategy: Any = None            # whose process_dataloader is wrapped

    @property
    def monitor(self):
        return self.train_monitor.monitor

    def setup(self, trainer, pl_module, stage: str) -> None:
        if stage != "fit" or self._strategy is not None:
            return
        strategy = self._strategy = trainer.strategy
        process = strategy.process_dataloader
        watch = self.train_monitor.watch_data

        def process_dataloader(dataloader: Any) -> Any:
            processed = process(dataloader)
            if trainer.training:        # not the sanity check's or validation's loaders
                watch(processed)
            return processed
        strategy.process_dataloader = process_dataloader

    def on_train_epoch_start(self, trainer, pl_module) -> None:
        self._one_loader(trainer)

    def _one_loader(self, trainer) -> None:
        """Several training loaders hand their batches together, as one: not watched (called
        before the first batch of a pass: at train start, an epoch resumed mid-way has no
        epoch start, and at each epoch start, after a reload)."""
        combined = getattr(trainer.fit_loop, "_combined_loader", None)
        if combined is not None and len(combined.flattened) > 1:
            self.train_monitor.unwatch_data()

    def on_train_start(self, trainer, pl_module) -> None:
        self._one_loader(trainer)
        self._samples = 0
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
                           else None, after_step=trainer.global_step)
        self._observed = trainer.global_step

    def on_before_backward(self, trainer, pl_module, loss) -> None:
        # ``loss``: the one backpropagated, training_step's divided by
        # accumulate_grad_batches (even in an epoch's last, shorter window) and, under
        # "16-mixed", multiplied by the GradScaler's scale, divided out again here
        step = self.train_monitor.train_step
        if step is not None and pl_module.automatic_optimization:
            step.add_loss(loss, scaler=getattr(trainer.precision_plugin, "scaler", None))

    def on_before_optimizer_step(self, trainer, pl_module, optimizer) -> None:
        step = self.train_monitor.train_step
        if step is not None and getattr(optimizer, "optimizer", optimizer) is step.optimizer:
            step.measure()

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        # each batch of the step (accumulate_grad_batches of them, fewer at an epoch's end);
        # one without a tensor leaves the step's count unknown
        size = samples_in(batch)
        self._samples = None if size is None or self._samples is None else \
            self._samples + size
        self.train_monitor.monitor.step_begins(trainer.global_step + 1)
        self.train_monitor.batch_given(batch)       # the step's batch: its identity

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if trainer.global_step <= self._observed:       # accumulating: no step yet
            return
        self._observed = trainer.global_step
        samples, self._samples = self._samples or None, 0
        # where Lightning's own checkpoint of this step goes, for the resume advice of a
        # stop found now; written below only when the stop asks for a checkpoint
        path = self._training.trainer_checkpoint = os.path.abspath(os.path.join(
            self.monitor.log_dir, "checkpoints", f"lightning_step{trainer.global_step}.ckpt"))
        found = self.train_monitor.observe(step=trainer.global_step,
                                           epoch=trainer.current_epoch + 1,
                                           batch_size=samples)
        stop = self.monitor.stop_requested or next((a for a in found if a.stops), None)
        if stop is not None:
            trainer.should_stop = True
            if asks_checkpoint([*found, stop]):
                # every rank calls it (a barrier under DDP); the global rank 0 writes
                trainer.save_checkpoint(path)

    def on_train_end(self, trainer, pl_module) -> None:
        self.train_monitor.close(exit=False)     # the trainer exits once it has ended

    def teardown(self, trainer, pl_module, stage: str) -> None:
        if stage != "fit":
            return
        if self._strategy is not None:
            self._strategy.__dict__.pop("process_dataloader", None)
            self._strategy = None
        exit_after(self.train_monitor.settings.stop_exit_code, self.monitor.stop_requested,
                   self.monitor.rank, [partial(callback.teardown, trainer, pl_module, stage)
                                       for callback in after_own(trainer.callbacks, self)])

    def on_exception(self, trainer, pl_module, exception: BaseException) -> None:
        self.monitor.close(reason="error", error=f"{type(exception).__name__}: {exception}")
