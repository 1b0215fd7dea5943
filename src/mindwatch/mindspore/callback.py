"""``TrainMonitor``: the MindSpore callback users add to ``Model.train``."""
from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from mindspore import nn
from mindspore.train import Callback

from ..anomaly import Anomaly
from ..basics.versions import Release
from ..decisions.exit_status import exit_after
from ..framework import FrameworkHooks
from ..monitor import Monitor
from ..pipeline.layer_state import LayerGrouping
from ..settings import MonitorSettings
from ..sinks.sink_set import SinkError
from . import compat
from .checkpoints.checkpoint import save_atomically
from .checkpoints.saved_states import ModelCheckpointWatch
from .checkpoints.snapshots import TrainStateSnapshots
from .exit_status import exit_after_stop
from .hardware.memory import mindspore_memory_reader
from .probes.state_steps import StateSteps
from .ranks.consensus import consensus_for
from .ranks.distributed import current_rank, replicated_state
from .ranks.fingerprints import Fingerprinter
from .ranks.own_work import OwnWork
from .reading.batch import BatchGuard
from .reading.cb_params import (
    SINK_MODE_DROPPED,
    batch_size_of,
    epoch_position,
    evaluation_of,
    field,
    optimizer_of,
    planned_steps,
    setup_fields,
    sink_mode_dropped,
)
from .reading.cell_reader import TrainCellReader
from .reading.outputs import StepOutputs, read_outputs
from .sinks.mindinsight import open_mindinsight_sink
from .step.functional import ForwardCell, JitTrainStep
from .step.limits import GraphLimits
from .step.lr import LrReader
from .step.protection import build_step, replay_outcome, report_notes, unprotected
from .step.weight_scale import WeightScaleProbe
from .step.wrap import MonitoredTrainStep


class TrainMonitor(Callback):
    """Monitors a MindSpore training run: a ``mindspore.train.Callback`` for ``Model.train``.

    Args:
        log_dir: the run directory (created if missing); this rank logs to
            ``<log_dir>/rank_<R>.jsonl``, anomaly reports go to ``anomalies/``, checkpoints
            to ``checkpoints/``.
        stream: where the console view writes (default ``sys.stdout``).
        clock: time source (tests pass a fake one).
        reader: how to read a train cell not built by ``wrap`` (a framework's, e.g.
            ``mindwatch.mindformers``); by default MindSpore's and the user's.
        tensorboard_dir: ``rank -> directory`` for ``tensorboard=True`` beside a framework's
            own TensorBoard runs (None from it, or no callable: ``<log_dir>/tensorboard/``).
        releases: the versions of a framework built on MindSpore (``mindwatch.mindformers``),
            for the run record beside MindSpore's; an untested one is said once.
        **settings: any ``MonitorSettings`` field, each with a default (docs/api.md lists
            them with units), e.g. ``print_interval=10``, ``grad_explode=100.0``,
            ``on_anomaly={"loss_spike": "stop"}``, ``tensorboard=True``.

    Raises:
        TypeError, ValueError: an unknown setting or a bad value (the message names it and
            what it accepts); an unwritable ``log_dir``; an existing run log in ``log_dir``
            without ``resume=True``.
        ImportError: a view was asked for whose package is missing (it says what to install).

    Several ranks: call ``mindspore.communication.init()`` first and put this callback last,
    so an earlier callback's ``request_stop()`` stops every rank after the same step.
    """

    def __init__(self, log_dir: str, *, stream=None, clock=None,
                 reader: TrainCellReader | None = None,
                 tensorboard_dir: Callable[[int], str | None] | None = None,
                 releases: Sequence[Release] = (), **settings: Any):
        rank = current_rank()
        self._reader = reader or TrainCellReader()
        self._saved = ModelCheckpointWatch()
        releases = (compat.release(), *releases)
        framework = FrameworkHooks(
            versions={release.key: release.version for release in releases},
            untested=tuple(release.untested for release in releases if release.untested),
            save_checkpoint=self._save_checkpoint,
            resume_hint=self._reader.resume_hint, notes=lambda: report_notes(self.train_step),
            memory_reader=mindspore_memory_reader(),
            snapshots=TrainStateSnapshots(self._train_cell),
            sinks={"mindinsight": open_mindinsight_sink}, unprotected=self._unprotected,
            saved_states=lambda: self._saved.states(), tensorboard_dir=tensorboard_dir,
            replay=self._replay,
            consensus=consensus_for, fingerprinter=Fingerprinter,
            push_limits=lambda limits: self._limits.push(self.train_step, limits),
            replicated=self._replicated)
        # wrap's or jit_step's step, or a framework's cell of mindwatch's making (_adopt):
        # both read and decide alike (outputs.ProtectedStep)
        self.train_step: Any = None
        self.monitor = Monitor(
            log_dir, rank=rank.rank, world_size=rank.world_size, local_rank=rank.local_rank,
            stream=stream, clock=clock, framework=framework, **settings)
        self._cb_params = None
        self._batches = BatchGuard(self.monitor)   # the step's batch (issue #46)
        self._last_step_num = 0
        self._mark: float | None = None        # the latest step end (step time)
        self._data_mark: float | None = None   # when this callback's step end was done
        self._said_grads_off = False
        self._layers: LayerGrouping | None = None
        self._data_time: float | None = None
        self._work = OwnWork()                 # CPU seconds in the step (straggler's cause)
        self._sink_error: SinkError | None = None
        self._lr = LrReader()
        self._limits = GraphLimits()
        self._states = StateSteps(self.settings.state_interval)
        self._weights: WeightScaleProbe | None = None    # the update-size rule's weights
        # MindSpore enters every callback as a context manager around training, and again
        # around each evaluation Model.fit runs between epochs: only the outermost exit ends
        # the run.
        self._entered = 0
        self._training = False
        self._evaluation: dict[str, float | None] | None = None

    # -- public API -------------------------------------------------------------------
    @property
    def settings(self) -> MonitorSettings:
        return self.monitor.settings

    def wrap(self, net_with_loss: nn.Cell, optimizer: nn.Optimizer, *,
             clip_grad_norm: float | None = None, skip_anomalous_updates: bool = True,
             sens: float = 1.0, per_layer_norms: bool = False,
             activations: Sequence[str] | None = None,
             attention_logits: Sequence[str] | None = None) -> MonitoredTrainStep:
        """A train-step Cell that also returns the pre-clip global gradient norm.

        Use it in place of ``nn.TrainOneStepCell``: ``Model(monitor.wrap(net, opt))``. Works
        in GRAPH_MODE and PYNATIVE_MODE; under data parallelism it reduces the gradients as
        ``nn.TrainOneStepCell`` does and measures the norm after the reduction.

        Args:
            net_with_loss: a Cell whose output is the loss (e.g. ``nn.WithLossCell``).
            optimizer: the ``nn.Optimizer`` that updates its parameters.
            clip_grad_norm: clip the gradients to this global L2 norm after measuring it
                (None: no clipping).
            skip_anomalous_updates: withhold the optimizer update, in the graph, on a step
                whose gradients are non-finite or whose norm exceeds ``grad_explode``; with
                ``on_anomaly`` "skip" also above the limits of the spike rules (and on a
                non-finite loss), on every rank.
            sens: the gradient's initial sensitivity (a fixed loss scale).
            per_layer_norms: also measure each layer's gradient norm in the graph (a layer
                is a parameter name without its last part: ``blocks.0.attn.qkv``), logged
                every ``layer_norms_interval`` steps and named in every gradient anomaly
                report.
            activations: fnmatch patterns over sub-Cell names (``blocks.*.mlp``): on state
                steps, each one's output max |x| and RMS.
            attention_logits: patterns naming ``nn.MultiheadAttention``s or Cells that output
                attention logits: on state steps, each one's largest (docs/api.md).

        Returns the ``MonitoredTrainStep`` Cell; its output is ``(loss, stats)``. Raises
        TypeError or ValueError naming a bad argument.

        Example: ``model = Model(monitor.wrap(nn.WithLossCell(net, loss_fn), optimizer))``
        """
        if not isinstance(net_with_loss, nn.Cell):
            raise TypeError("net_with_loss must be a mindspore.nn.Cell returning the loss; got "
                            f"{type(net_with_loss).__name__}")
        return self._build_step(net_with_loss, optimizer, clip_grad_norm=clip_grad_norm,
                                skip_anomalous_updates=skip_anomalous_updates, sens=sens,
                                per_layer_norms=per_layer_norms, probed=net_with_loss,
                                activations=activations, attention_logits=attention_logits)

    def jit_step(self, forward_fn: Callable[..., Any], optimizer: nn.Optimizer, *,
                 has_aux: bool = False, clip_grad_norm: float | None = None,
                 skip_anomalous_updates: bool = True, sens: float = 1.0,
                 per_layer_norms: bool = False, network: nn.Cell | None = None,
                 activations: Sequence[str] | None = None,
                 attention_logits: Sequence[str] | None = None) -> JitTrainStep:
        """The functional style's train step (``value_and_grad`` + ``@ms.jit``), built with
        wrap's protection: the pre-clip global norm measured in the graph and the update
        withheld there on an anomalous step.

        Args:
            forward_fn: ``forward_fn(*batch)`` returns the loss, or ``(loss, *aux)`` with
                ``has_aux=True`` (the tutorials' ``forward_fn`` calling the model and the
                loss function).
            optimizer: the ``nn.Optimizer`` over the parameters to train.
            has_aux, clip_grad_norm, skip_anomalous_updates, sens, per_layer_norms,
                activations, attention_logits: as for ``value_and_grad`` and ``wrap``.
            network: the model ``forward_fn`` calls, whose sub-Cells ``activations`` and
                ``attention_logits`` name (the forward function hides it).

        Returns a ``JitTrainStep``: ``outputs = step(*batch)`` trains one step and returns
        its numbers; then ``monitor.observe(step=n, outputs=outputs)`` (docs/pipelines.md).
        """
        if not callable(forward_fn):
            raise TypeError("forward_fn must be a function of the batch returning the loss "
                            f"(or (loss, *aux) with has_aux=True); got {type(forward_fn).__name__}")
        cell = self._build_step(ForwardCell(forward_fn), optimizer,
                                clip_grad_norm=clip_grad_norm,
                                skip_anomalous_updates=skip_anomalous_updates, sens=sens,
                                per_layer_norms=per_layer_norms, has_aux=has_aux,
                                probed=network, activations=activations,
                                attention_logits=attention_logits)
        return JitTrainStep(cell, state_due=lambda: self._states.due(self.monitor.last_step + 1),
                            clock=self.monitor.clock.perf_counter, batches=self._batches,
                            next_step=lambda: self.monitor.last_step + 1)

    def _build_step(self, network: nn.Cell, optimizer: nn.Optimizer,
                    **options: Any) -> MonitoredTrainStep:
        self.train_step = build_step(self.settings, network, optimizer, **options)
        self._limits.forget()                    # a new graph holds no limits yet
        self._push_skip_limits()
        self._layers = LayerGrouping([p.name for p in optimizer.parameters])
        self._weigh(WeightScaleProbe(optimizer), self.monitor.last_step)
        return self.train_step

    def _adopt(self, cell: Any) -> None:
        """A framework's train cell of mindwatch's (MindFormers' ``runner_wrapper``): this
        monitor drives it as it drives ``wrap``'s step."""
        if cell is None or cell is self.train_step:
            return
        cell.adopt(self.settings.grad_explode)
        self.train_step = cell
        self._limits.forget()
        self._layers = LayerGrouping([p.name for p in cell.optimizer.parameters])
        self._weights = WeightScaleProbe(cell.optimizer)

    def observe(self, *, step: int, outputs: StepOutputs | None = None,
                **fields: Any) -> list[Anomaly]:
        """A custom loop's step, without ``Model``; see ``mindwatch.Monitor.observe``.
        ``outputs``: what a ``jit_step`` step returned (loss, norm, LR, whether the update was
        withheld); fields given by name take precedence. The step ends as under
        ``Model.train`` (``Monitor.end_step``): on several ranks they settle stops, rewinds
        and replicas together, so a loop that breaks once ``stop_requested`` is set stops
        every rank after the same step.

        Example: ``anomalies = monitor.observe(step=1, loss=2.3, lr=1e-3, grad_norm=0.7)``
        returns the anomalies of that step (empty when healthy).
        """
        if outputs is not None:
            if not isinstance(outputs, StepOutputs):
                raise TypeError("outputs must be what a monitor.jit_step(...) step returned; "
                                f"got {type(outputs).__name__}")
            fields = {**outputs.observation(self._layers), "data_time_s": outputs.data_time_s,
                      **fields}
        found = self.monitor.end_step(step=step,
                                      state=self._states.read(step, self.train_step),
                                      replicas=self._train_cell(), **fields)
        self._weigh_if_due(step)
        return found

    def _weigh(self, probe: WeightScaleProbe, step: int) -> None:
        """Measure the weights the next updates change and hand them to the update-size
        rule, with the LR the next step applies."""
        self._weights = probe
        if self.settings.max_update_ratio is None:     # the rule is off: nothing to measure
            return
        optimizer = getattr(self.train_step, "optimizer", None) or optimizer_of(self._cb_params)
        lrs = self._lr.coming(optimizer) if optimizer is not None else None
        self.monitor.weights(probe.measure(step), lr=max(lrs) if lrs else None)

    def _weigh_if_due(self, step: int) -> None:
        if self._weights is not None and self._weights.due(step):
            self._weigh(self._weights, step)

    def _push_skip_limits(self) -> None:
        self._limits.push(self.train_step, self.monitor.step_limits)

    def close(self) -> None:
        """End the run cleanly (the ``end`` record; sinks closed); for custom loops.
        ``Model.train`` closes it by itself. Idempotent. After a stop under
        ``stop_exit_code`` it then raises ``SystemExit`` with that status, as
        ``Model.train`` does."""
        self.monitor.close()
        exit_after(self.settings.stop_exit_code, self.monitor.stop_requested,
                   self.monitor.rank)

    @property
    def anomalies(self) -> list[Anomaly]:
        """The current run segment's anomalies, in the order they were found."""
        return self.monitor.anomalies

    @property
    def stop_requested(self) -> Anomaly | None:
        """What stops the current segment (an anomaly, a signal, another rank's stop), or
        None: a custom loop breaks out once it is set after ``observe``, on every rank after
        the same step."""
        return self.monitor.stop_requested

    def state_dict(self) -> dict[str, Any]:
        """The detectors' windows and the loss average, for a resumed run to keep its
        history: save it beside the model checkpoint (it is plain JSON)."""
        return self.monitor.state_dict()

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore ``state_dict()``'s output before training resumes."""
        self.monitor.load_state_dict(state)

    # -- MindSpore callback hooks ---------------------------------------------------------
    def on_train_begin(self, run_context) -> None:
        cb = run_context.original_args()
        self._cb_params = cb
        self._training = True
        self._evaluation = None
        self._saved.begin(cb)
        self._adopt(self._reader.protected_step(field(cb, "train_network")))
        if field(cb, "optimizer") is None and self.train_step is not None \
                and self._is_wrapped(cb):
            # Model(train_step) knows no optimizer, and MindSpore's callbacks that change the
            # LR (ReduceLROnPlateau, LearningRateScheduler) read it from here
            cb.optimizer = self.train_step.optimizer
        self._last_step_num = int(getattr(cb, "cur_step_num", 0) or 0)
        dropped = sink_mode_dropped(cb)
        planned = self._planned_steps(cb, dropped)
        self.monitor.start(total_steps=None if planned is None else
                           self._last_step_num + planned, after_step=self._last_step_num,
                           **setup_fields(cb, wrapped=self._is_wrapped(cb)))
        if dropped:
            self.monitor.notice(SINK_MODE_DROPPED)
        self._mark = self._data_mark = self.monitor.clock.perf_counter()
        self._data_time = None
        self._push_skip_limits()               # a cell adopted above holds no limits yet
        optimizer = optimizer_of(cb)
        if self._weights is None and optimizer is not None:   # no protected step: judged only
            self._weights = WeightScaleProbe(optimizer)
        if self._weights is not None:          # weights a checkpoint loaded since are these
            self._weigh(self._weights, self._last_step_num)

    def on_train_epoch_begin(self, run_context) -> None:
        self._mark = self._data_mark = self.monitor.clock.perf_counter()

    def on_train_step_begin(self, run_context) -> None:
        # From the end of mindwatch's work after the previous step to here this rank fetched
        # its batch and ran other callbacks: the part of a step in which the other ranks wait
        # for a straggler, and the input pipeline's share (data_bound).
        if self._data_mark is not None:
            self._data_time = self.monitor.clock.perf_counter() - self._data_mark
        cb = run_context.original_args()
        self.monitor.step_begins(int(cb.cur_step_num))               # the coming step
        self._work.begin()
        if self.train_step is not None and self._is_wrapped(cb):   # cur_step_num: the coming step
            self.train_step.state_due = self._states.due(int(cb.cur_step_num))
        if field(cb, "dataset_sink_mode", False):
            self._batches.sink_mode()
        else:                   # its identity; a known bad one's update withheld
            self._batches.begin(int(cb.cur_step_num), field(cb, "train_dataset_element"),
                                self.train_step if self._is_wrapped(cb)
                                else field(cb, "train_network"))

    def on_train_step_end(self, run_context) -> None:
        now = self.monitor.clock.perf_counter()
        cb = run_context.original_args()
        if self._cb_params is None:       # a RunContext that skipped on_train_begin
            self.on_train_begin(run_context)
        step = int(cb.cur_step_num)
        covered = max(step - self._last_step_num, 1)
        work = self._work.end(covered)          # before the outputs are read
        step_time = (now - self._mark) / covered if self._mark is not None else None
        self._mark = now
        self._last_step_num = step
        self._saved.step_end()
        if self._is_wrapped(cb):
            out = read_outputs(cb.net_outputs, wrapped_by=self.train_step)
        else:
            cell = field(cb, "train_network")
            out = self._reader.read(cb.net_outputs, cell)
            if out.param_sq_norms is not None and self._layers is None:
                names = self._reader.layer_names(cell)
                self._layers = LayerGrouping(names) if names else None
        self._batches.mark(out, step)           # the bounds restored, once the outputs are read
        if out.lr_groups is None:
            out.lr_groups = self._lr.applied(optimizer_of(cb))
        if out.grad_norm is None and not self._said_grads_off:
            self._said_grads_off = True
            self.monitor.notice(self._reader.grad_checks_off(field(cb, "train_network")))
        epoch_step, steps_per_epoch = epoch_position(cb)
        state = self._states.read(step, self.train_step) if self._is_wrapped(cb) else \
            self._states.read_unwrapped(step, optimizer_of(cb), out)
        try:
            self.monitor.end_step(
                **out.observation(self._layers),
                step=step, epoch=getattr(cb, "cur_epoch_num", None), steps=covered,
                epoch_step=epoch_step, steps_per_epoch=steps_per_epoch,
                step_time_s=step_time, data_time_s=self._data_time,
                work_time_s=work,
                batch_size=self.settings.batch_size or batch_size_of(cb), state=state,
                replicas=self._train_cell(),
                stop_asked=run_context.get_stop_requested())   # a callback before this one
        except SinkError as exc:
            # on_sink_error="raise": the step ended (the exchange too) and the segment stops
            # after it; raised once training has ended.
            self._sink_error = exc
        self._weigh_if_due(step)
        self._data_time = None
        if self.monitor.stop_requested is not None:
            run_context.request_stop()
        self._data_mark = self.monitor.clock.perf_counter()

    def on_train_epoch_end(self, run_context) -> None:
        evaluation, self._evaluation = self._evaluation, None
        self.monitor.end_epoch(evaluation)

    # Model.fit evaluates between epochs, inside the training run: its batches are progress
    # (no hang), its results go into the epoch's record, and it ends nothing.
    def on_eval_begin(self, run_context) -> None:
        if self._training:
            self.monitor.evaluating()

    on_eval_step_end = on_eval_begin

    def on_eval_end(self, run_context) -> None:
        if self._training:
            self.monitor.evaluating()
            self._evaluation = evaluation_of(run_context.original_args())

    def on_train_end(self, run_context) -> None:
        self._training = False
        self.monitor.close()
        error, self._sink_error = self._sink_error, None
        if error is not None:
            raise error
        exit_after_stop(self, run_context, self.settings.stop_exit_code,
                        self.monitor.stop_requested, self.monitor.rank)

    def __enter__(self) -> TrainMonitor:
        self._entered += 1
        return self

    def __exit__(self, exc_type, exc, traceback) -> None:
        # Runs on an exception too, when on_train_end never will. An evaluation's exit (the
        # inner one in Model.fit) must not end the run; an error there still does.
        self._entered = max(self._entered - 1, 0)
        if not self._training:          # a standalone model.eval(), or training has ended
            return
        if exc is not None:
            self._training = False
            self.monitor.close(reason="error", error=f"{exc_type.__name__}: {exc}")
        elif self._entered == 0:
            self._training = False
            self.monitor.close()

    # -- helpers ----------------------------------------------------------------------------
    def _planned_steps(self, cb, sink_dropped: bool) -> int | None:
        """The steps this training call will run (a framework that resumes mid-epoch
        trains fewer)."""
        return planned_steps(cb, sink_dropped=sink_dropped)

    def _is_wrapped(self, cb) -> bool:
        network = getattr(cb, "train_network", None)
        return self.train_step is not None and (network is None or network is self.train_step)

    def _unprotected(self) -> str | None:
        cb = self._cb_params
        return unprotected(self.train_step, cb is None or self._is_wrapped(cb), self._reader,
                           field(cb, "train_network"))

    def _train_cell(self) -> nn.Cell | None:
        cell = self.train_step
        if cell is None and self._cb_params is not None:
            cell = getattr(self._cb_params, "train_network", None)
        return cell

    def _replicated(self) -> bool:
        """``FrameworkHooks.replicated``: from MindSpore's parallel context
        (``replicated_state``); a framework built on MindSpore adds what its config says."""
        return replicated_state(self.monitor.world_size)

    def _replay(self) -> Any:
        """``FrameworkHooks.replay``; a known bad batch's step is not computed again."""
        if self._batches.withheld:
            return None
        return replay_outcome(self.train_step, self._cb_params)

    def _save_checkpoint(self, step: int, reason: str) -> str | None:
        cell = self._train_cell()
        if cell is None:
            return None
        return save_atomically(cell, self.monitor.log_dir, step, self.monitor.rank, reason)

