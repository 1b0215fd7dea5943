"""``monitor.protect(optimizer)``: the optimizer's step measured, judged and, when anomalous,
withheld, through the step hooks every ``torch.optim.Optimizer`` runs.

The optimizer stays the user's own object (its type, ``param_groups``, ``state_dict``, an
``LRScheduler`` built on it, Hugging Face's and Lightning's wrappers around it): nothing is
wrapped, two hooks are registered. Before the step: the pre-clip global norm of the
gradients (``torch.nn.utils.get_total_norm``, the number ``clip_grad_norm_`` returns), the
verdict (verdict.py), clipping to ``clip_grad_norm`` after measuring, the copies withholding
needs. After it: the update undone where the verdict says so (withholding.py). No value is
read to the host in either on an accelerator; ``observe`` reads the step's numbers once
(reading/outputs.py). On the CPU, where reading a value waits for nothing, the verdict is
read when it is taken, and only a withheld step is copied and undone, whole, in the post-hook.

The step's loss is the sum of the losses backpropagated since the last step (loss_window.py).

A withheld step leaves the parameters, the optimizer state and its step counts as they were,
readable so as soon as ``optimizer.step()`` returns: on an accelerator, what the device could
not select is settled at the first read of the optimizer's state (``optimizer.state``,
``state_dict()``, ``load_state_dict()``: settling_state.py), else by ``observe`` or the next
step, whichever comes first.
An LR scheduler stepped by the loop still counts the step, as it counts the steps that AMP's
``GradScaler`` skips: the schedule follows the loop's steps.
"""
from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch

from ..probes.state_probe import StateProbe
from ..ranks.shared_verdict import SharedVerdict
from ..reading.batch import BatchReading, StepBatch
from ..reading.outputs import PendingStep
from .loss_window import LossWindow
from .replay import StepReplay
from .settling_state import SettlingState
from .verdict import StepVerdict
from .withholding import Withholding


class ProtectedStep:
    """The hooks on one optimizer, and what the step between them left for ``observe``."""

    def __init__(self, optimizer: torch.optim.Optimizer, *, grad_explode: float,
                 clip_grad_norm: float | None, skip_anomalous_updates: bool):
        self.optimizer = optimizer
        self.clip_grad_norm = clip_grad_norm
        self.skip_anomalous = skip_anomalous_updates
        self.verdict = StepVerdict(grad_explode=grad_explode)
        self._withholding = Withholding()
        self.replay = StepReplay()              # the closures monitor.backward ran
        self.losses = LossWindow()              # the losses backpropagated for the coming step
        self._apply: torch.Tensor | None = None
        self._apply_known = False               # _apply read on the host (a withheld step)
        self._measured = False                  # measure() ran for the coming step
        self.pending: PendingStep | None = None
        # the step whose host part withholding has not settled (its verdict not yet read),
        # and the view of optimizer.state that settles it when read
        self._unsettled: PendingStep | None = None
        self._view: SettlingState | None = None
        # On a CPU the verdict's value is on the host as soon as it is computed: reading it
        # waits for nothing, and a healthy step then needs no copy at all. On an accelerator
        # the read would wait for the device, so the step copies and selects there instead.
        # None: on the host when the gradients are on the CPU (tests force either).
        self.verdict_on_host: bool | None = None
        self.closures = 0                       # steps given a closure (not measured)
        # a trainer that measures inside the closure, where the gradients are computed
        self.in_closure = False
        self.shared: SharedVerdict | None = None        # several ranks (TrainMonitor sets it)
        # a state step is coming (TrainMonitor sets it): its probe, given the step's tensors
        self.state_probe: StateProbe | None = None
        self.state_due: Callable[[], bool] = lambda: False
        # whether this step measures the weights' norm (TrainMonitor sets it: every
        # WEIGH_EVERY steps), for the update-size rule
        self.weigh_due: Callable[[], bool] = lambda: False
        # the batches the model's forwards saw, and whether one is a known bad one
        # (TrainMonitor sets them, with model=: reading/batch.py)
        self.batches: BatchReading | None = None
        self.known_batch: Callable[[StepBatch], bool] = lambda batch: False
        self._handles = [optimizer.register_step_pre_hook(self._before),
                         optimizer.register_step_post_hook(self._after),
                         # state_dict() and load_state_dict() read the state: settled first
                         optimizer.register_state_dict_pre_hook(self._settle_before_read),
                         optimizer.register_load_state_dict_pre_hook(self._settle_before_read)]

    def remove(self) -> None:
        self.settle_now()
        for handle in self._handles:
            handle.remove()
        self._handles = []

    def add_loss(self, loss: torch.Tensor, *, scaler: Any = None) -> None:
        """One backpropagated loss; the step judges the sum of those since the last step
        (gradient accumulation's micro-batches: loss_window.py). ``scaler``: AMP's
        ``GradScaler`` when ``loss`` is the scaled loss."""
        self.losses.add(loss, scaler=scaler)

    def take(self) -> PendingStep | None:
        """The last step's numbers, once; the host's part of a withheld update is done when
        they are read (``settle``). Losses backpropagated since without an optimizer step
        (one AMP's ``GradScaler`` skipped) are dropped: they were that step's."""
        pending, self.pending = self.pending, None
        if pending is None:
            self.losses.take()
            self._take_batch()
        return pending

    def settle(self, applied: bool) -> None:
        """The host's part of the last step, given its verdict (``observe`` read it)."""
        view, self._view = self._view, None
        if view is not None:
            view.release()
        self._unsettled = None
        self._withholding.settle(applied)
        if view is not None:
            view.mirror()

    def settle_now(self) -> None:
        """The host's part of the last step, if any is left: its verdict read to the host
        (the read ``observe`` makes; ``observe`` then reads nothing more)."""
        if self._unsettled is not None:
            self.settle(not self._unsettled.read().skipped)

    # -- the hooks --------------------------------------------------------------------------
    def _before(self, optimizer: torch.optim.Optimizer, args: tuple, kwargs: dict) -> None:
        # args: (optimizer, closure?) as step() was called (Accelerate passes closure=None)
        closure = args[1] if len(args) > 1 else kwargs.get("closure")
        if closure is not None:
            # the closure computes the gradients inside the step, after this hook: measured
            # there by whoever runs it (Lightning's callback), or not at all
            if not self.in_closure:
                self._settle_unread()
                self.replay.step_measured()
                self.closures += 1
                self._apply = None
                self._take_batch()
            return
        if self.in_closure and self._measured:
            # measured already, by the trainer, after a closure run before the step: AMP's
            # GradScaler under Lightning runs it, unscales, then calls step() without it
            return
        self.measure()

    def measure(self) -> None:
        """Measure, judge and prepare the coming update from the gradients as they are now:
        the pre-hook's work, called by a trainer whose closure computes the gradients inside
        ``optimizer.step`` (``in_closure``) once they are ready."""
        self._settle_unread()
        self.replay.step_measured()
        self._measured = True
        optimizer = self.optimizer
        with torch.no_grad():
            params = [p for group in optimizer.param_groups for p in group["params"]
                      if p.grad is not None]
            grads = [p.grad for p in params]
            device = grads[0].device if grads else _device_of(optimizer)
            norm = (torch.nn.utils.get_total_norm(grads, 2.0, False, None).float()
                    if grads else None)
            loss = self.losses.take()
            if loss is not None:
                loss = loss.to(device, non_blocking=True)
            batch = self._take_batch()
            # a batch the run knows to be bad: withheld before it is applied, whatever else
            known = batch is not None and self.skip_anomalous and self.known_batch(batch)
            lrs = [group["lr"] for group in optimizer.param_groups]
            host_lrs = [None if isinstance(lr, torch.Tensor) else float(lr) for lr in lrs]
            tensor_lrs = [lr for lr in lrs if isinstance(lr, torch.Tensor)]
            apply = self.verdict.decide(
                loss=loss, norm=norm, tensor_lrs=tensor_lrs, device=device,
                lrs_ok=self.verdict.lrs_within([lr for lr in host_lrs if lr is not None]))
            if known:
                apply = torch.zeros((), dtype=torch.bool, device=device)
            local = known_anywhere = None
            if self.shared is not None:
                apply, local, known_anywhere = self.shared.share(apply, known)
            copied, self._apply = False, None
            if self.skip_anomalous:           # the copies first: clipping changes no weight
                on_host = self.verdict_on_host if self.verdict_on_host is not None \
                    else device.type == "cpu"
                on_host = on_host or known      # the host knows it: undone whole after
                if not on_host or known or not bool(apply):
                    self._withholding.before(optimizer, params)
                    self._apply, copied = apply, True
                    self._apply_known = on_host
            if self.state_probe is not None and self.state_due():
                self.state_probe.begin(params, grads, self._withholding.params_before()
                                       if copied else None)
            if self.clip_grad_norm is not None and norm is not None:
                torch.nn.utils.clip_grads_with_norm_(params, self.clip_grad_norm, norm)
            nan = torch.full((), math.nan, device=device)
            # the weights this update changes, measured (before clipping and the update) on
            # the steps the update-size rule asks for: detectors/update_size.py
            weights = (torch.nn.utils.get_total_norm(params, 2.0, False, None).float()
                       if params and self.weigh_due() else nan)
            stats = [nan if loss is None else loss, nan if norm is None else norm,
                     apply.float(), weights.to(device)]
            if local is not None:
                stats += list(local.unbind())
            stats += [lr.detach().float().reshape(()).to(device) for lr in tensor_lrs]
            if known_anywhere is not None:      # some rank's batch was a known bad one
                stats.append(known_anywhere.float())
            batch_size = 0              # the batch's numbers, unless read already (known)
            if batch is not None and not batch.read:
                stats += list(batch.on_device(device).unbind())
                batch_size = batch.read_size
            self.pending = PendingStep(
                torch.stack(stats), host_lrs, loss is not None, norm is not None,
                self.skip_anomalous, ranks=0 if local is None else len(local),
                rank=self.shared.rank if self.shared is not None else 0, batch=batch,
                batch_size=batch_size, known_bad=known,
                known_shared=known_anywhere is not None)

    def _after(self, optimizer: torch.optim.Optimizer, args: tuple, kwargs: dict) -> None:
        apply, self._apply = self._apply, None
        self._measured = False
        if apply is None:
            return
        if self._apply_known:                 # the host read it: withheld, undone whole now
            self._withholding.restore()
        elif self._withholding.after(apply):
            # what the device could not select waits for the verdict: the first read of
            # the state, observe, or the next step reads it
            assert self.pending is not None           # measure() left the step's numbers
            self._unsettled = self.pending
            self._view = SettlingState.install(optimizer, self.settle_now)

    def _take_batch(self) -> StepBatch | None:
        return self.batches.take() if self.batches is not None else None

    def _settle_before_read(self, optimizer: torch.optim.Optimizer, *args: Any) -> None:
        self.settle_now()

    def _settle_unread(self) -> None:
        """Before a step: the last one's host part, if any is left (its verdict read now,
        if nobody observed it), so the optimizer finds its state as the verdict left it."""
        self.settle_now()
        self.pending = None


def _device_of(optimizer: torch.optim.Optimizer) -> torch.device:
    for group in optimizer.param_groups:
        for param in group["params"]:
            return param.device
    return torch.device("cpu")
