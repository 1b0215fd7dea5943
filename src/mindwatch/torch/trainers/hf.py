"""``HFCallback``: mindwatch in Hugging Face's ``transformers.Trainer``.

``callbacks=[HFCallback("runs/exp1")]`` is the whole change. At train begin the callback
protects the Trainer's optimizer (the torch optimizer inside Accelerate's wrapper) with its
LR scheduler, and takes over clipping: the Trainer's ``max_grad_norm`` clips after mindwatch
has measured the pre-clip norm and judged the step, so the Trainer is set to clip nothing
until train end (its logged ``grad_norm`` is the pre-clip norm, as before). The loss is
the model's own (``outputs.loss``), taken by a forward hook in training mode, as the Trainer
backpropagates it: summed over the step's micro-batches, it is the loss the Trainer logs
(``_take_loss``); a ``compute_loss`` outside the model leaves the loss unrecorded and
unjudged (the norm still is).

A stop shows in the Trainer's own terms. ``should_training_stop`` is set, and the stop is
logged through the Trainer (``{"mindwatch_stop": "loss_nonfinite at step 36",
"mindwatch_stop_step": 36}``): in ``log_history`` and to every ``report_to`` tracker, with the
step's own log line beside it. A stop that asks for a checkpoint has the Trainer save its own
``checkpoint-<step>`` too (``should_save``, whatever ``save_strategy`` says; its
``trainer_state.json`` holds the log and ``should_training_stop``), and the anomaly report's
resume advice is ``trainer.train(resume_from_checkpoint=...)`` on it: the step's update was
withheld, so it is the state before the step, and the Trainer goes on at the next step.
Under ``stop_exit_code`` the process exits from the train end, after the callbacks that end
after this one (stopping.py); the code after ``trainer.train()`` does not run then.

A step's batch is named by its samples' indices as the Trainer's training loader fetched
them (reading/sample_indices.py): the loader the callback is handed at train begin, and the
one ``get_resumed_dataloader`` makes for an epoch resumed mid-way (``resume_from_checkpoint``
without ``ignore_data_skip``: accelerate's loader that skips the batches trained on), which
the callback wraps on the calling Trainer until train end. A Trainer without that method
(older transformers) skips those batches in a loader of its own: that epoch's indices are
unknown (null), the next epochs' named again.
"""
from __future__ import annotations

import math
import os
import sys
from collections.abc import Mapping
from functools import partial
from types import FrameType
from typing import Any

import torch
from transformers import Trainer, TrainerCallback
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

from ...anomaly import Anomaly
from ...decisions.exit_status import after_own, exit_after, stopped_by
from ..callback import TrainMonitor
from ..checkpoints.training_state import HF
from .stopping import asks_checkpoint


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
        self._trainer: Any = None          # the Trainer calling, between train begin and end
        self._scaler: Any = None           # AMP's GradScaler of the step (fp16), or None
        self._training = self.train_monitor.training_state
        self._training.trainer = HF
        self._resumed: tuple[Any, Any] | None = None   # the Trainer wrapped, its own method

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
        self._trainer = _calling_trainer(state)
        self.train_monitor.watch_data(kwargs.get("train_dataloader"))
        self._watch_resumed(self._trainer)
        # the callback is handed the bare model; the Trainer's DDP (not under FSDP or
        # DeepSpeed) says every rank holds the same state
        self.train_monitor.trained_in(getattr(self._trainer, "model_wrapped", None))
        self.monitor.start(total_steps=state.max_steps or None, after_step=state.global_step)

    def _watch_resumed(self, trainer: Any) -> None:
        """The loader a mid-epoch resume makes (a new one, which skips the batches trained
        on) watched as the first is: the Trainer's method wrapped on the instance."""
        made = getattr(trainer, "get_resumed_dataloader", None)
        if made is None:
            return
        watch = self.train_monitor.watch_data

        def get_resumed_dataloader(*args: Any, **kwargs: Any) -> Any:
            loader = made(*args, **kwargs)
            watch(loader)
            return loader
        self._resumed = (trainer, trainer.__dict__.get("get_resumed_dataloader"))
        trainer.get_resumed_dataloader = get_resumed_dataloader

    def _take_loss(self, module: torch.nn.Module, inputs: Any, output: Any) -> None:
        """The model's loss, recorded as the Trainer backpropagates it. Between the model
        and ``backward`` the Trainer scales it: divided by the window's micro-batch count
        (for a model that does not take ``num_items_in_batch``, or transformers before
        4.46), not at all (a loss the model already normalised over the window's tokens),
        times the processes (``average_tokens_across_devices``), times AMP's scale; which
        of these depends on the model and the release. The gradient that reaches the loss
        is that factor, so the loss times it, with AMP's scale divided out, is what was
        backpropagated, and their sum over the window is the loss the Trainer logs for the
        step: the sum of ``training_step``'s returns. A loss never backpropagated is not
        counted."""
        step = self.train_monitor.train_step
        if not module.training or step is None:
            return
        loss = output.get("loss") if isinstance(output, Mapping) else getattr(output, "loss",
                                                                               None)
        if not (isinstance(loss, torch.Tensor) and loss.numel() == 1 and loss.requires_grad):
            return
        # its value now: compute_loss may scale it in place (``loss *= num_processes``), and
        # a hook registered before that is given the gradient of this value
        value = loss.detach().clone()
        scaler = self._scaler

        def backpropagated(grad: torch.Tensor) -> None:
            # runs in backward, on the device: nothing is read to the host
            step.add_loss(value * grad.reshape(value.shape), scaler=scaler)
        loss.register_hook(backpropagated)

    def on_step_begin(self, args, state, control, optimizer=None, **kwargs):
        # AMP's GradScaler (fp16 on an accelerator), whose scale the gradient reaching the
        # loss includes: Accelerate's optimizer wrapper holds it
        self._scaler = getattr(optimizer, "scaler", None)
        self.train_monitor.monitor.step_begins(state.global_step + 1)

    def on_step_end(self, args, state, control, **kwargs):
        # where the Trainer saves this step (_save_checkpoint), for the resume advice of a
        # stop found now; written below only when the stop asks for a checkpoint
        self._training.trainer_checkpoint = os.path.abspath(os.path.join(
            args.output_dir, f"{PREFIX_CHECKPOINT_DIR}-{state.global_step}"))
        found = self.train_monitor.observe(
            step=state.global_step, epoch=_epoch(state.epoch),
            batch_size=args.per_device_train_batch_size * args.gradient_accumulation_steps)
        stop = self.monitor.stop_requested or next((a for a in found if a.stops), None)
        if stop is not None:
            control.should_training_stop = True
            # the Trainer's own checkpoint, after this callback (_maybe_log_save_evaluate)
            control.should_save = control.should_save or asks_checkpoint([*found, stop])
            self._log_stop(stop, state, control)
        return control

    def _log_stop(self, stop: Anomaly, state: Any, control: Any) -> None:
        """The stop as an entry of the Trainer's log: ``Trainer.log`` puts it in
        ``log_history`` and hands it to every callback's ``on_log``, the ``report_to``
        trackers' included (a string for those that take text, the step as a number for
        those that take only numbers). Then the Trainer logs the step's own figures."""
        entry: dict[str, Any] = {"mindwatch_stop": stopped_by(stop),
                                 "mindwatch_stop_step": stop.step or state.global_step}
        if self._trainer is not None:
            self._trainer.log(entry)
        else:                   # no Trainer found: its history at least
            state.log_history.append({**entry, "step": state.global_step})
        control.should_log = True       # after log(), which clears it

    def on_train_end(self, args, state, control, **kwargs):
        self._restore()
        self.train_monitor.close(exit=False)     # the trainer exits once it has ended
        trainer, self._trainer = self._trainer, None
        callbacks = trainer.callback_handler.callbacks if trainer is not None else []
        exit_after(self.train_monitor.settings.stop_exit_code, self.monitor.stop_requested,
                   self.monitor.rank, [partial(callback.on_train_end, args, state, control,
                                               **kwargs)
                                       for callback in after_own(callbacks, self)])

    def _restore(self) -> None:
        if self._hook is not None:
            self._hook.remove()
            self._hook = None
        if self._args is not None:
            self._args.max_grad_norm = self._max_grad_norm
            self._args = None
        if self._resumed is not None:
            trainer, own = self._resumed
            if own is None:
                trainer.__dict__.pop("get_resumed_dataloader", None)
            else:
                trainer.get_resumed_dataloader = own
            self._resumed = None


def _calling_trainer(state: Any) -> Trainer | None:
    """The ``Trainer`` calling this callback. Hugging Face hands a callback the state, the
    control and the model, never the Trainer, whose ``log`` is the one way to reach every
    ``report_to`` tracker and whose list says which callbacks end after this one. It is the
    ``self`` of a frame up the stack (its training loop calls the callback handler, which
    calls this callback), told by identity: its ``state`` is the one given. None when no
    frame holds it: the stop then goes into ``log_history`` only, and the process exits
    from this callback's train end, before the callbacks after it end."""
    frame: FrameType | None = sys._getframe(1)
    while frame is not None:
        found = frame.f_locals.get("self")
        if isinstance(found, Trainer) and found.state is state:
            return found
        frame = frame.f_back
    return None


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
