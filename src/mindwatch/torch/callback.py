"""``TrainMonitor``: mindwatch for a PyTorch training loop (and, through ``trainers/``,
Hugging Face's Trainer and Lightning)."""
from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from contextlib import nullcontext
from typing import Any

import torch

from ..anomaly import Anomaly
from ..basics.checks import check_bool, check_number
from ..decisions.exit_status import exit_after
from ..detectors.update_size import WeightScale, rule_of
from ..framework import FrameworkHooks
from ..monitor import Monitor
from ..observation import ReplayOutcome
from ..recovery.skipping import SkipLimits
from ..settings import MonitorSettings
from . import compat
from .checkpoints.checkpoint import resume_snippet, save_atomically
from .checkpoints.resume import saved_states
from .checkpoints.snapshots import TrainStateSnapshots
from .checkpoints.training_state import TrainingState, ddp_of, plain_module
from .hardware.memory import torch_memory_reader
from .probes.activation_probe import ActivationProbes
from .probes.state_probe import StateProbe
from .ranks.consensus import consensus_for
from .ranks.distributed import current_rank, initialised, replicated_state
from .ranks.fingerprints import Fingerprinter
from .ranks.local_norms import LocalNorms
from .ranks.shared_verdict import SharedVerdict
from .reading.batch import BatchReading, batch_fields, known_batch, known_ledger
from .reading.outputs import StepOutputs
from .reading.sample_indices import SampleIndices
from .step.loss_window import LossWindow
from .step.protection import ProtectedStep

# steps between two measures of the weights' norm (detectors/update_size.py): a second pass
# over the weights in every step would cost as much as the gradient norm's; their RMS moves
# by a fraction of a percent over this many healthy steps
WEIGH_EVERY = 100

UNPROTECTED_LOOP = ("monitor.backward is called but monitor.protect(optimizer) never was, so no "
                    "gradient norm is measured and no bad update can be withheld: protect the "
                    "optimizer before the first step (optimizer = monitor.protect(optimizer, "
                    "model=model))")


class TrainMonitor:
    """Monitors a PyTorch training run.

    Args:
        log_dir: the run directory (created if missing); this rank logs to
            ``<log_dir>/rank_<R>.jsonl`` (the rank from torchrun's ``RANK``/``WORLD_SIZE``),
            anomaly reports go to ``anomalies/``, checkpoints to ``checkpoints/``.
        stream: where the console view writes (default ``sys.stdout``).
        clock: time source (tests pass a fake one).
        **settings: any ``MonitorSettings`` field, each with a default (docs/api.md), e.g.
            ``grad_explode=100.0``, ``on_anomaly={"loss_spike": "skip"}``.

    Raises TypeError or ValueError naming a bad setting, an unwritable ``log_dir`` or an
    existing run log without ``resume=True``; ImportError for a view whose package is
    missing (it says what to install).

    Example::

        monitor = TrainMonitor("runs/exp1")
        optimizer = monitor.protect(torch.optim.AdamW(model.parameters()), model=model)
        for step, (x, y) in enumerate(loader, start=1):
            monitor.backward(lambda: loss_fn(model(x), y))     # or the loss itself
            optimizer.step()
            optimizer.zero_grad()
            if any(a.stops for a in monitor.observe(step=step)):
                break
        monitor.close()
    """

    def __init__(self, log_dir: str, *, stream=None, clock=None, **settings: Any):
        self._state = TrainingState()
        self.train_step: ProtectedStep | None = None
        release = compat.release()
        framework = FrameworkHooks(
            versions={release.key: release.version},
            untested=(release.untested,) if release.untested else (),
            save_checkpoint=self._save_checkpoint,
            resume_hint=lambda path: resume_snippet(path, self._state),
            notes=self._notes, memory_reader=torch_memory_reader(),
            snapshots=TrainStateSnapshots(self._state), unprotected=self._unprotected,
            replay=self._replay, consensus=consensus_for, fingerprinter=Fingerprinter,
            push_limits=self._push_limits, saved_states=lambda: saved_states(self._state),
            replicated=lambda: replicated_state(self.monitor.world_size, self._ddp_wrapped,
                                                self._state.optimizer))
        rank = current_rank()
        self.monitor = Monitor(log_dir, rank=rank.rank, world_size=rank.world_size,
                               local_rank=rank.local_rank, stream=stream, clock=clock,
                               framework=framework, **settings)
        self._local_norms: LocalNorms | None = None
        self._ended: float | None = None    # the previous step's end, after the exchange
        # the model trains in DistributedDataParallel (protect's model=, or a trainer's own
        # wrapper): every rank holds the same state, one checkpoint is the job's
        self._ddp_wrapped = False
        self._activations: ActivationProbes | None = None
        self._batches: BatchReading | None = None      # the batch's identity (model=)
        # the sample indices the watched loaders fetched (data=, the trainers' loaders)
        self._indices = SampleIndices()
        self._began = False
        self._said_closure = False
        self._observing: StepOutputs | None = None      # the step observe is recording
        self._scale: WeightScale | None = None   # the weights the update-size rule judges by
        # the losses monitor.backward was given while no optimizer is protected
        self.loss_window = LossWindow()
        # why this set-up cannot replay a withheld step (a trainer sets it), said once
        self.replay_unavailable = ("monitor.backward was given the loss: give it a closure "
                                   "that computes it (monitor.backward(lambda: "
                                   "loss_fn(model(x), y))) to replay withheld steps")
        self._said_replay = False

    @property
    def settings(self) -> MonitorSettings:
        return self.monitor.settings

    # -- the loop's three calls --------------------------------------------------------------
    def trained_in(self, wrapper: Any) -> None:
        """A trainer's own wrapper of the model (Hugging Face's ``model_wrapped``), when the
        model given to ``protect`` is the bare one: a DistributedDataParallel wrapper says
        every rank holds the same state (``FrameworkHooks.replicated``)."""
        self._ddp_wrapped |= ddp_of(wrapper) is not None

    def protect(self, optimizer: torch.optim.Optimizer, *, model: torch.nn.Module | None = None,
                clip_grad_norm: float | None = None, skip_anomalous_updates: bool = True,
                schedulers: Sequence[Any] = (), activations: Sequence[str] | None = None,
                attention_logits: Sequence[str] | None = None,
                data: torch.utils.data.DataLoader | None = None) -> torch.optim.Optimizer:
        """Measure, judge and (when anomalous) withhold each of ``optimizer``'s steps.

        Args:
            optimizer: any ``torch.optim.Optimizer``; returned as it is, with two step hooks
                (step/protection.py): an LR scheduler built on it, before or after, works.
            model: the model it trains, for checkpoints and rewinds by name (without it they
                hold the optimizer's parameters in order). A ``DistributedDataParallel``
                model also gets a communication hook that measures each rank's own
                gradient norm before the reduction (``local_grad_norm``, ``origin_rank``);
                pass it before its first forward.
            clip_grad_norm: clip the gradients to this global L2 norm after measuring (in
                place of the loop's ``clip_grad_norm_``; None: no clipping).
            skip_anomalous_updates: withhold the update of a step whose loss or gradients are
                non-finite, whose norm is above ``grad_explode`` or whose LR blew up; with
                ``on_anomaly`` "skip", also above the spike rules' limits. False: measure
                only.
            schedulers: the LR schedulers the loop steps, saved in checkpoints and rewound
                with the optimizer.
            activations: fnmatch patterns over ``model``'s module names (``blocks.*.mlp``):
                on state steps, each one's output max |x| and RMS.
            attention_logits: patterns naming modules that output attention logits before
                the softmax: on state steps, each one's largest (probes/activation_probe.py).
            data: the training ``DataLoader`` (with ``model=``): a step's batch is then
                named by its samples' indices too (the anomaly's and the ledger's
                ``batch.indices``), as the loader fetched them from its sampler, each training
                forward of ``model`` taking the next batch's (reading/sample_indices.py).
                Unknown (null) for a loader without a batch sampler or over an
                ``IterableDataset``. ``observe(batch_indices=...)`` takes precedence.

        Raises TypeError or ValueError naming a bad argument, or a second protect.
        """
        if not isinstance(optimizer, torch.optim.Optimizer):
            raise TypeError("optimizer must be a torch.optim.Optimizer; got "
                            f"{type(optimizer).__name__}")
        if model is not None and not isinstance(model, torch.nn.Module):
            raise TypeError(f"model must be a torch.nn.Module or None; got "
                            f"{type(model).__name__}")
        check_number("clip_grad_norm", clip_grad_norm, low=0.0, low_open=True, optional=True)
        check_bool("skip_anomalous_updates", skip_anomalous_updates)
        for scheduler in schedulers:
            if not callable(getattr(scheduler, "state_dict", None)):
                raise TypeError("schedulers must be LR schedulers (with state_dict()); got "
                                f"{type(scheduler).__name__}")
        if data is not None and not isinstance(data, torch.utils.data.DataLoader):
            raise TypeError("data must be the training torch.utils.data.DataLoader or None; "
                            f"got {type(data).__name__}")
        if data is not None and model is None:
            raise ValueError("data needs model= (each training forward of the model takes "
                             "its batch's sample indices)")
        if (activations or attention_logits) and (model is None
                                                  or self.settings.state_interval is None):
            raise ValueError("activations and attention_logits need model= (the modules they "
                             "name) and a state_interval (they are measured on state steps)")
        if self.train_step is not None:
            if self.train_step.optimizer is not optimizer:
                raise ValueError("this monitor already protects another optimizer: use one "
                                 "TrainMonitor per optimizer")
            self.train_step.remove()
        self.train_step = ProtectedStep(optimizer, grad_explode=self.settings.grad_explode,
                                        clip_grad_norm=clip_grad_norm,
                                        skip_anomalous_updates=skip_anomalous_updates)
        self._ddp_wrapped |= ddp_of(model) is not None
        if self.monitor.world_size > 1 and initialised():
            ddp = ddp_of(model)
            if ddp is not None and self._local_norms is None:
                self._local_norms = LocalNorms.on(ddp, self.monitor.notice,
                                                  self.monitor.clock.perf_counter)
            self.train_step.shared = SharedVerdict(self.monitor.rank, self.monitor.world_size,
                                                   self._local_norms)
        # checkpoints, state records and activations name the model's own modules, without
        # DDP's "module." or torch.compile's "_orig_mod."
        given, model = model, plain_module(model)
        self._state.model, self._state.optimizer = model, optimizer
        probe = StateProbe(self.settings.state_interval, self._parameter_names)
        self.train_step.state_probe = probe
        # the step coming is the one after the last observed
        self.train_step.state_due = lambda: probe.due(self.monitor.last_step + 1)
        if self._activations is not None:
            self._activations.remove()
            self._activations = None
        if self._batches is not None:
            self._batches.remove()
        self._batches = self.train_step.batches = \
            BatchReading(given, model, known_ledger(self.monitor.bad_batches), self._indices) \
            if given is not None and model is not None else None
        if data is not None:
            self.watch_data(data)
        self.train_step.known_batch = known_batch(self.monitor.bad_batches)
        if model is not None and (activations or attention_logits):
            self._activations = ActivationProbes(
                model, activations=activations, attention_logits=attention_logits,
                due=self.train_step.state_due)
        self._state.schedulers = list(schedulers)
        self._push_limits()
        self._weigh_now(optimizer)
        return optimizer

    def backward(self, loss: torch.Tensor | Callable[[], torch.Tensor], *, scaler: Any = None,
                 **kwargs: Any) -> None:
        """``loss.backward(**kwargs)``, the loss kept for the step: several calls before a
        step (gradient accumulation) are summed, the objective whose gradient the step
        applies, so a loop that backpropagates ``loss / accum_steps`` records the window's
        mean (step/loss_window.py). Without ``protect`` the loss is kept all the same, for
        ``observe`` (``loss_window``), so a non-finite loss is seen. ``loss``: the batch's
        loss, or a closure that computes it (``lambda: loss_fn(model(x), y)``), which
        mindwatch calls now and, when the step's update is withheld and ``replay`` is on,
        once more on the same weights (step/replay.py). ``scaler``: AMP's ``GradScaler``,
        whose scaled loss is backpropagated while the loss is recorded (such steps are not
        replayed)."""
        self._begin()
        self.monitor.step_begins(self.monitor.last_step + 1)
        step = self.train_step
        if callable(loss) and not isinstance(loss, torch.Tensor):
            if step is not None and scaler is None and self.settings.replay:
                loss = step.replay.run(loss)
            else:
                loss = loss()
        elif step is not None:
            step.replay.tensor_given()
        if scaler is not None and step is not None:
            step.replay.tensor_given()
            self.replay_unavailable = ("the step used AMP's GradScaler, whose scaling replay "
                                       "does not repeat")
        if not isinstance(loss, torch.Tensor) or loss.numel() != 1:
            raise TypeError("loss must be a tensor holding one value (the batch's loss); got "
                            f"{type(loss).__name__}"
                            f"{'' if not isinstance(loss, torch.Tensor) else tuple(loss.shape)}")
        if step is not None:
            step.add_loss(loss)
        else:
            self.loss_window.add(loss)          # unprotected: observe judges it all the same
        (loss if scaler is None else scaler.scale(loss)).backward(**kwargs)

    def watch_data(self, loader: Any) -> bool:
        """Name each training batch of ``loader`` (a ``DataLoader``, or accelerate's wrapper
        of one) by its samples' indices from the loader's next pass on (``protect``'s
        ``data``; a trainer's loaders). False when the loader's indices cannot be told."""
        return self._indices.watch(loader)

    def unwatch_data(self) -> None:
        """The watched loaders as they were; the indices unknown from now on."""
        self._indices.remove()

    def batch_given(self, batch: Any) -> None:
        """A trainer that hands each training batch (Lightning): its tensors identify the
        step's batch in place of the protected model's inputs (reading/batch.py)."""
        if self._batches is not None:
            self._batches.given(batch)

    def observe(self, *, step: int, **fields: Any) -> list[Anomaly]:
        """Record step ``step`` (1-based): the protected step's loss, LR, pre-clip norm and
        whether its update was withheld, read once; fields given by name (any argument of
        ``mindwatch.Monitor.observe``) take precedence. Returns the step's anomalies; one
        whose ``stops`` is true asks the loop to stop after this step."""
        self._begin()
        protected = self.train_step
        pending = protected.take() if protected is not None else None
        if protected is not None and pending is not None:
            outputs = pending.read()
            protected.settle(not outputs.skipped)
            self._observing = outputs
            measured = outputs.observation()
            extra = {**measured.get("extra", {}), **(fields.get("extra") or {})}
            fields = {**measured, **batch_fields(pending), **fields,
                      **({"extra": extra} if extra else {})}
        elif protected is None:
            self._unprotected_step(fields)
        self._say_closures()
        state = None
        if protected is not None and protected.state_probe is not None:
            state = protected.state_probe.read(step, protected.optimizer)
            if state is not None and self._activations is not None:
                state["activations"] = self._activations.read()
        weighed = self._observing.weight_norm if self._observing is not None else None
        if self._local_norms is not None:     # where this rank entered the collective
            fields.setdefault("work_time_s", self._local_norms.work_since(
                self._ended, fields.get("data_time_s")))
        try:
            found = self.monitor.end_step(step=step, state=state, replicas=self._state,
                                          **fields)
        finally:
            self._observing = None
            self._ended = self.monitor.clock.perf_counter()
        if weighed is not None and self._scale is not None:   # judges the steps to come
            self._scale = WeightScale(norm=weighed, count=self._scale.count,
                                      rule=self._scale.rule)
            self.monitor.weights(self._scale)
        return found

    def close(self, *, exit: bool = True) -> None:
        """End the run (the ``end`` record; sinks closed). Idempotent. After a stop under
        ``stop_exit_code`` it then raises ``SystemExit`` with that status (a trainer's
        callback passes ``exit=False`` and exits once its framework has ended). The watched
        loaders are as they were."""
        self._indices.remove()
        self.monitor.close()
        if exit:
            self.exit_if_stopped()

    def exit_if_stopped(self) -> None:
        """``SystemExit`` with the ``stop_exit_code`` status when mindwatch stopped this run
        (decisions/exit_status.py); returns otherwise."""
        exit_after(self.settings.stop_exit_code, self.monitor.stop_requested, self.monitor.rank)

    def __enter__(self) -> TrainMonitor:
        return self

    def __exit__(self, exc_type, exc, traceback) -> None:
        if exc is not None:
            self._indices.remove()
            self.monitor.close(reason="error", error=f"{exc_type.__name__}: {exc}")
        else:
            self.close()

    @property
    def anomalies(self) -> list[Anomaly]:
        return self.monitor.anomalies

    @property
    def stop_requested(self) -> Anomaly | None:
        """What stops the current segment (an anomaly, a signal, another rank's stop), or
        None: a loop breaks out once it is set after ``observe``, on every rank after the
        same step."""
        return self.monitor.stop_requested

    @property
    def training_state(self) -> TrainingState:
        """What checkpoints, snapshots and resume advice hold (the model, the protected
        optimizer, its schedulers, the trainer that runs the loop); trainers/ fill in their
        part."""
        return self._state

    def state_dict(self) -> dict[str, Any]:
        """The detectors' windows and the loss average (plain JSON), to save beside the
        model's checkpoint for a resumed run."""
        return self.monitor.state_dict()

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.monitor.load_state_dict(state)

    # -- helpers ----------------------------------------------------------------------------
    def _begin(self) -> None:
        if not self._began:
            self._began = True
            self.monitor.start()

    def _push_limits(self, limits: SkipLimits | None = None) -> None:
        """``FrameworkHooks.push_limits``: the protected step's verdict judges the next step
        by these (the monitor's, when called after ``protect``)."""
        if self.train_step is not None:
            limits = limits or self.monitor.step_limits
            self.train_step.verdict.set_limits(loss=limits.loss, grad_norm=limits.grad_norm,
                                               lr=limits.lr)

    def _weigh_now(self, optimizer: torch.optim.Optimizer) -> None:
        """The weights' scale before training (one read to the host, at ``protect``), so
        that the first update is judged too; then the protected step measures it every
        ``WEIGH_EVERY`` steps, in the step's numbers (no read of its own)."""
        if self.settings.max_update_ratio is None:     # the rule is off: nothing to measure
            return
        params = [p for group in optimizer.param_groups for p in group["params"]]
        with torch.no_grad():
            norm = float(torch.nn.utils.get_total_norm(params, 2.0, False, None)) \
                if params else 0.0
        self._scale = WeightScale(norm=norm, count=sum(p.numel() for p in params),
                                  rule=rule_of(optimizer))
        lrs = [float(group["lr"]) for group in optimizer.param_groups]
        self.monitor.weights(self._scale, lr=max(lrs) if lrs else None)
        step = self.train_step
        if step is not None:        # the next step is the one after the last observed
            step.weigh_due = lambda: (self.monitor.last_step + 1) % WEIGH_EVERY == 0

    def _unprotected_step(self, fields: dict[str, Any]) -> None:
        """A step of a loop that calls ``monitor.backward`` but never protected its optimizer
        (the docs' loop, ``protect`` forgotten): its loss is still judged, a NaN caught;
        its update cannot be withheld, which the run says once (not HEALTHY)."""
        if self.loss_window.count == 0:
            return
        loss = self.loss_window.take_value()
        fields.setdefault("loss", loss)
        self.monitor.unwatched(UNPROTECTED_LOOP)

    def _say_closures(self) -> None:
        if self.train_step is not None and self.train_step.closures and not self._said_closure:
            self._said_closure = True
            self.monitor.notice("optimizer.step(closure) computes the gradients inside the "
                                "step: those steps are neither measured nor protected")

    def _replay(self) -> ReplayOutcome | None:
        """``FrameworkHooks.replay``: the withheld step being observed, computed again."""
        step, outputs = self.train_step, self._observing
        if step is None or outputs is None:
            return None
        if outputs.known_bad:
            # withheld for what its batch did before, not for what it does now: computing
            # it again tells nothing (every rank knows it: the shared verdict says so)
            return None
        if not step.replay.last:
            if not self._said_replay:
                self._said_replay = True
                self.monitor.notice(f"replay: the withheld step {self.monitor.last_step} was "
                                    f"not computed again: {self.replay_unavailable}")
            return None
        params = [p for group in step.optimizer.param_groups for p in group["params"]]
        # the replay's forwards are no new batch
        with self._batches.paused() if self._batches is not None else nullcontext():
            return step.replay.replay(
                params, step.verdict, outputs.lr_groups, discard=self._local_norms.take
                if self._local_norms is not None else lambda: None)

    def _unprotected(self) -> str | None:
        if self.train_step is None:
            return "monitor.protect(optimizer) was not called"
        if not self.train_step.skip_anomalous:
            return ("monitor.protect(..., skip_anomalous_updates=False) applies every update: "
                    "leave skip_anomalous_updates=True, the default")
        return None

    def _notes(self) -> list[str]:
        step = self.train_step
        if step is not None and not step.skip_anomalous:
            return ["protect(skip_anomalous_updates=False): anomalous updates were applied"]
        return []

    def _parameter_names(self) -> dict[int, str]:
        model = self._state.model
        return {} if model is None else {id(p): name for name, p in model.named_parameters()}

    def _save_checkpoint(self, step: int, reason: str) -> str | None:
        if self._state.optimizer is None and self._state.model is None:
            return None
        return save_atomically(self._state, self.monitor.log_dir, step, self.monitor.rank,
                               reason)
