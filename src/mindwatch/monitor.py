"""The framework-free monitor: observation -> detectors -> policy -> actions, and every record
to the sinks. Adapters (``mindwatch.mindspore``) feed it plain numbers and hand it, at
construction, the ``FrameworkHooks`` through which it carries out what needs the framework
(checkpoints, resume hints, device memory, framework-only views).

``Monitor`` runs each step through the pipeline and composes the parts that own the rest,
handed their collaborators here: ``Actions`` (what a finding does), ``StopRequests`` (signals,
sink failures, a user's stop), ``RankDecisions`` (what the ranks decide together),
``ReplicaCheck``, ``Replays``, ``StateInput``, ``HardwareInput``, ``HangGuard``: docs/design.md."""
from __future__ import annotations

import os
import platform
import socket
import sys
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, TextIO

from . import records
from .anomaly import Anomaly
from .background.hangs import HangGuard
from .background.hardware_input import HardwareInput
from .basics.clock import Clock, SystemClock
from .basics.rank import rank_from_env
from .basics.run_dir import prepare
from .decisions.actions import Actions
from .decisions.bad_batches import BadBatches, ledger_paths, with_indices
from .decisions.job_share import JobScope
from .decisions.replays import Replays
from .decisions.responder import Responder
from .decisions.stops import StopRequests
from .detectors import Detector, LrAnomalyDetector, build_detectors
from .detectors.update_size import WeightScale
from .framework import FrameworkHooks
from .job.fields import kinds_of
from .job.job import Job
from .observation import HardwareSample, StepObservation
from .pipeline import history
from .pipeline.loss_stats import LossStats
from .pipeline.resumed_history import ResumedHistory
from .pipeline.segment import CurrentSegment
from .pipeline.state_input import StateInput
from .pipeline.throughput import Throughput
from .pipeline.timing import StepTiming
from .pipeline.writer import RecordWriter
from .policy import Policy
from .ranks.decisions import RankDecisions
from .ranks.peers import Peers
from .ranks.rank_sync import RankSync
from .ranks.replicas import ReplicaCheck
from .records import End, Epoch, Notice, Run, Versions
from .recovery.rewinding import RewindEvent, RewindGuard, RewindWish, require_snapshots
from .recovery.skipping import SkipGuard, SkipLimits
from .runlog.heartbeats import BEFORE_STEP, EVALUATING, EXCHANGE, IN_STEP, STARTUP_EXCHANGE
from .settings import MonitorSettings
from .sinks.base import Sink
from .sinks.console import ConsoleSink
from .sinks.factory import check_framework_views, open_sinks
from .sinks.sink_set import SinkError
from .trackers import open_tracker
from .version import __version__

if TYPE_CHECKING:
    import numpy as np

# No loss and no gradient norm at the first step: nothing a rule judges a step by came in.
NOTHING_OBSERVED = ("no loss and no gradient norm reached it at the first step, so no anomaly "
                    "of the training can be found; hand them in: observe(loss=..., "
                    "grad_norm=...), monitor.backward(loss) under PyTorch, wrap or jit_step "
                    "under MindSpore")


class Monitor:
    """Records one training run of one rank: ``observe`` each step, ``close`` at the end.

    Args:
        log_dir: the run directory; created if missing and proved writable now. This rank's
            log is ``<log_dir>/rank_<R>.jsonl``.
        rank, world_size, local_rank: this process's place in the job; by default read
            from the launcher's environment (``RANK_ID``/``RANK_SIZE``, ``RANK``/
            ``WORLD_SIZE``, ``OMPI_COMM_WORLD_*``, ...), else a single rank.
        clock: source of wall and monotonic time (tests pass a fake one).
        stream: where the console view writes (default ``sys.stdout``).
        framework: what the core needs from a training framework (``FrameworkHooks``);
            ``mindwatch.mindspore.TrainMonitor`` supplies MindSpore's.
        **settings: any ``MonitorSettings`` field (see docs/api.md), e.g. ``grad_explode=50.0``.

    Raises:
        TypeError, ValueError: an unknown setting or a bad value, naming the argument and
            what it accepts; an unwritable ``log_dir``; an existing run log without
            ``resume=True``; ``mindinsight=True`` without a framework that writes it.
        ImportError: an optional view was asked for whose package is missing (the message
            says what to ``pip install``).

    Example::

        monitor = Monitor("runs/exp1", grad_explode=50.0)
        for step, batch in enumerate(loader, start=1):
            loss, grad_norm = train_step(batch)
            if any(a.stops for a in monitor.observe(step=step, loss=loss, lr=lr,
                                                    grad_norm=grad_norm)):
                break
        monitor.close()
    """

    def __init__(self, log_dir: str, *, rank: int | None = None,
                 world_size: int | None = None, local_rank: int | None = None,
                 clock: Clock | None = None, stream: TextIO | None = None,
                 framework: FrameworkHooks | None = None, **settings: Any):
        self.settings = MonitorSettings.from_kwargs(**settings)
        if framework is not None and not isinstance(framework, FrameworkHooks):
            raise TypeError("framework must be a mindwatch.FrameworkHooks or None; got "
                            f"{type(framework).__name__}")
        self.framework = framework or FrameworkHooks()
        check_framework_views(self.settings, self.framework.sinks)    # before creating files
        require_snapshots(self.settings.policies, self.framework.snapshots)
        env = rank_from_env()
        self.rank = env.rank if rank is None else rank
        self.world_size = env.world_size if world_size is None else world_size
        self.local_rank = env.local_rank if local_rank is None else local_rank
        self.log_dir = os.fspath(log_dir) if isinstance(log_dir, os.PathLike) else log_dir
        self.log_path = prepare(self.log_dir, self.rank, self.settings.resume)
        self.clock: Clock = clock or SystemClock()
        self.versions = {Versions.MINDWATCH: __version__, Versions.MINDSPORE: None,
                         Versions.PYTHON: platform.python_version(), **self.framework.versions}
        self._said_untested = False      # the framework's untested versions, said once
        self.policy = Policy(self.settings.policies, signal=self.settings.on_signal)
        self.detectors: list[Detector] = build_detectors(self.settings, self.rank)
        self.peers = Peers(rank=self.rank, world_size=self.world_size, policy=self.policy,
                           straggler_window=self.settings.straggler_window,
                           straggler_factor=self.settings.straggler_factor,
                           straggler_work_factor=self.settings.straggler_work_factor,
                           straggler_warmup=self.settings.trend_warmup,
                           detectors=self.detectors)
        # on_anomaly "skip": the limits handed to wrap's graph, the actions, escalation.
        self.skips = SkipGuard.from_detectors(self.policy, max_skips=self.settings.max_skips,
                                              detectors=self.detectors)
        # on_anomaly "rewind": snapshots, the target, escalation (the framework copies).
        self.rewinds = RewindGuard(self.policy, snapshot_every=self.settings.snapshot_every,
                                   snapshots_kept=self.settings.snapshots_kept,
                                   max_rewinds=self.settings.max_rewinds, rank=self.rank,
                                   store=self.framework.snapshots, detectors=self.detectors)
        self.console = ConsoleSink(
            rank=self.rank, print_interval=self.settings.print_interval, stream=stream,
            verbose=self.rank == 0 or self.settings.print_all_ranks)
        self._writer = RecordWriter(rank=self.rank, clock=self.clock, console=self.console,
                                    open_sinks=self._open_sinks,
                                    on_error=self.settings.on_sink_error)
        self._sync = RankSync(self, self.framework.fingerprinter)
        self.responder = Responder(log_dir=self.log_dir, rank=self.rank, policy=self.policy,
                                   framework=self.framework,
                                   scope=JobScope(self._sync, self.peers, kinds_of))
        self.loss_stats = LossStats(self.settings.loss_smoothing)
        self._timing = StepTiming(Throughput(self.settings.tokens_per_sample,
                                             self.settings.flops_per_token,
                                             self.settings.peak_tflops), self.clock)
        # Timing starts at construction, so a custom loop's first step has a duration; an
        # explicit start() (the MindSpore adapter's, at train begin) restarts it.
        self._current = CurrentSegment(self.clock.perf_counter())
        # resume=True: the rules' history read back from the run log, restored now (before
        # wrap or protect reads the limits); said at the first start (resumed_history.py)
        self._resumed: ResumedHistory | None = ResumedHistory.read(
            self.log_path, self.settings, detectors=self.detectors, loss_stats=self.loss_stats,
            skips=self.skips, rewinds=self.rewinds)
        self._current.segment.last_step = self._resumed.last_step or 0
        current, responder, writer = self._current, self.responder, self._writer
        self._actions = actions = Actions(current=current, responder=responder, writer=writer)
        self._stops = StopRequests(policy=self.policy, current=current, responder=responder,
                                   writer=writer, actions=actions)
        self._ranks = RankDecisions(peers=self.peers, rewinds=self.rewinds, skips=self.skips,
                                    current=current, actions=actions, writer=writer)
        self.replicas = ReplicaCheck(peers=self.peers, act=actions.act)
        self.job = Job(rank=self.rank, world_size=self.world_size, log_dir=self.log_dir,
                       log_path=self.log_path, device=self.local_rank, clock=self.clock,
                       resume=self.settings.resume, notice=self.notice)
        self._hardware = HardwareInput(
            interval_s=self.settings.hardware_interval_s, all_devices=self.settings.all_devices,
            memory_reader=self.framework.memory_reader, detectors=self.detectors,
            current=current, responder=responder, writer=writer, actions=actions)
        self._state = StateInput(detectors=self.detectors, writer=writer, act=actions.act)
        self._replays = Replays(replay=self.framework.replay if self.settings.replay else None,
                                emit=writer.emit, rank=self.rank, device=self.local_rank,
                                hardware=lambda: responder.hardware)
        self.bad_batches = BadBatches(log_dir=self.log_dir, rank=self.rank,
                                      known_from=ledger_paths(self.settings, self.log_dir),
                                      replayed=self._replays.replayed,
                                      world_size=self.world_size)
        self._hangs = HangGuard.build(
            world_size=self.world_size, log_dir=self.log_dir, device=self.local_rank,
            places=lambda: self.peers.places, notice=self.notice,
            write_job=self.job.hang if self.rank == 0 else None, end_job=self.job.end,
            timeout_s=self.settings.hang_timeout_s, clock=self.clock, rank=self.rank,
            policy=self.policy, current=current, responder=responder, writer=writer,
            actions=actions)

    # -- life cycle -----------------------------------------------------------------------
    def _open_sinks(self) -> list[Sink]:
        return open_sinks(self.settings, log_dir=self.log_dir, log_path=self.log_path,
                          rank=self.rank, local_rank=self.local_rank, console=self.console,
                          framework_sinks=self.framework.sinks,
                          tensorboard_dir=self.framework.tensorboard_directory(self.rank),
                          open_tracker=open_tracker)

    @property
    def sinks(self) -> list[Sink]:
        return self._writer.sinks

    def start(self, *, total_steps: int | None = None, after_step: int | None = None,
              **run_info: Any) -> None:
        """Begin a run segment: write the ``run`` record now, restart the step timer, take
        the first snapshot (``on_anomaly="rewind"``) and, on several ranks, build the ranks'
        exchange.

        After ``close`` this begins a new segment appended to the same log (a second
        ``model.train`` call) with a clean stop request, anomaly list and step counter;
        detector history and the loss average carry over. ``after_step``: the step training
        resumes after (a trainer's own resume; default: the last step this monitor saw).
        ``run_info`` goes into the ``run`` record. Idempotent while a segment is running.
        """
        segment = self._current.segment
        if segment.closed:
            self._writer.reopen()
        if segment.closed or not segment.started:
            self._current.begin(self.clock.perf_counter())
        self._ensure_started(total_steps=total_steps, **run_info)
        self._resume_history(after_step)
        self._begin_training(after_step)

    def _resume_history(self, after_step: int | None) -> None:
        """Once: the run log's history from where a trainer resumes (``after_step``), said."""
        resumed, self._resumed = self._resumed, None
        if resumed is not None:
            message = resumed.begin(after_step)
            self._current.segment.last_step = resumed.last_step or self.last_step
            if message is not None:
                self.notice(message)

    def _begin_training(self, after_step: int | None = None) -> None:
        segment = self._current.segment
        if segment.training:
            return
        segment.training = True
        self._resume_history(None)           # a loop that never called start()
        after_step = segment.last_step if after_step is None else after_step
        self.rewinds.begin(after_step)
        consensus = self.framework.consensus
        self._hangs.phase(STARTUP_EXCHANGE, after_step)
        self._sync.begin(after_step, lambda: None if consensus is None else consensus(
            self.world_size, self.notice, self.peers))
        self._hangs.phase(BEFORE_STEP, after_step + 1)
        if self._sync.exchanging:
            self.job.begin(self.peers.places, self.world_size)
        self._push_limits()                  # a loaded state_dict carries windows

    def _ensure_started(self, *, total_steps: int | None = None, **run_info: Any) -> None:
        if self._current.segment.closed:
            raise RuntimeError("this monitor is closed; call start() to append a new run "
                               "segment to its log")
        if self._current.segment.started:
            return
        self._current.segment.started = True
        total_steps = self.settings.total_steps or total_steps
        self.console.total_steps = total_steps
        self._timing.eta.begin(total_steps)
        self._hardware.start()
        run = {Run.SCHEMA: records.SCHEMA_VERSION, Run.WORLD_SIZE: self.world_size,
               Run.HOST: socket.gethostname(), Run.PID: os.getpid(),
               Run.CONFIG: self.settings.as_record(), Run.VERSIONS: self.versions,
               Run.LOG_PATH: self.log_path, Run.TOTAL_STEPS: total_steps,
               Run.ARGV: list(sys.argv), **run_info}
        self._writer.emit(records.RUN, run)
        self.job.started(run)
        if not self._said_untested:
            self._said_untested = True
            for message in self.framework.untested:
                self.notice(message)
        self._hardware.run()
        self._hangs.start(self._current.segment.last_step)
        if self.settings.on_signal is not None and not self._stops.install_signals():
            self.notice("SIGTERM and SIGINT are left alone: signal handlers can only be "
                        "installed from the main thread (on_signal)")

    def close(self, reason: str | None = None, error: str | None = None) -> None:
        """End the run segment: the last epoch's record, the ``end`` record, sinks closed.

        Args:
            reason: the ``end`` record's reason, one of ``records.END_REASONS``; by default
                ``"error"`` when ``error`` is given, ``"stopped"`` after a stop, else
                ``"completed"``.
            error: what went wrong, for the ``end`` record (``"ValueError: ..."``).

        Raises ValueError for an unknown ``reason``. Idempotent: a second call does nothing.
        """
        segment = self._current.segment
        if segment.closed:
            return
        if reason is not None and reason not in records.END_REASONS:
            raise ValueError(f"reason must be one of {records.END_REASONS}; got {reason!r}")
        self._ensure_started()
        self._hangs.stop()                   # training ended: no hang can be reported now
        self._hardware.stop()
        self._actions.act_on_pending()
        self._actions.act(self.rewinds.settle(segment.last_step, [], False, stopping=True)[1])
        self._stops.check_signal()           # one that came after the last step
        self.end_epoch()
        error = error or segment.sink_error
        end = {End.REASON: reason or segment.end_reason(error), End.STEPS: segment.last_step,
               End.ELAPSED_S: self.clock.perf_counter() - segment.start_perf, End.ERROR: error,
               End.STOPPED_BY: segment.stopped_by(self.rank)}
        self._writer.emit(records.END, end)
        self.job.end(end)
        self._hangs.ended(str(end[End.REASON]))
        segment.closed = True
        self._writer.close()
        self._stops.finish()                 # a received signal takes its usual course now

    @property
    def closed(self) -> bool:
        return self._current.segment.closed

    @property
    def stop_requested(self) -> Anomaly | None:
        """The anomaly (or request) that stops the current segment, if any."""
        return self._current.segment.stop_requested

    @property
    def anomalies(self) -> list[Anomaly]:
        """The current segment's anomalies, in the order they were found."""
        return self._current.segment.anomalies

    @property
    def last_step(self) -> int:
        return self._current.segment.last_step

    # -- inputs -----------------------------------------------------------------------------
    def observe(self, *, step: int, loss: Any = None, lr: Any = None, grad_norm: Any = None,
                epoch: int | None = None, step_time_s: float | None = None,
                skipped: bool = False, steps: int = 1, batch_size: int | None = None,
                grads_finite: bool | None = None, lr_groups: list[Any] | None = None,
                layer_grad_norms: Mapping[str, Any] | None = None,
                extra: Mapping[str, Any] | None = None,
                local_grad_norms: Sequence[Any] | None = None,
                data_time_s: Any = None, epoch_step: int | None = None,
                steps_per_epoch: int | None = None, batch: Mapping[str, Any] | None = None,
                skip_reason: str | None = None,
                batch_indices: Sequence[int] | None = None) -> list[Anomaly]:
        """Record one training step (or ``steps`` steps ending at ``step``).

        Args:
            step: global step, 1-based, as the framework counts it.
            loss, lr, grad_norm: Python numbers, numpy scalars or 0-d tensors, or None
                when unknown. ``lr`` is the LR applied at this step; ``grad_norm`` the
                global L2 norm of the gradients before clipping.
            epoch: 1-based epoch; a new value closes the previous epoch (``epoch`` record).
            epoch_step, steps_per_epoch: ``step``'s place within ``epoch`` (1-based) and the
                epoch's length, as the framework's own step log numbers them (MindFormers'
                ``step:[6/20]``); None when unknown.
            step_time_s: seconds per step; by default the time since the previous step end.
            skipped: the optimizer update of this step was withheld.
            steps: training steps this observation covers (dataset sink mode).
            batch_size: samples per step on this rank, for ``samples_per_s``.
            grads_finite: every gradient element finite (None: not measured).
            lr_groups: every parameter group's LR, when there are several.
            layer_grad_norms: layer name -> gradient L2 norm.
            extra: more fields for the ``step`` record (e.g. ``loss_scale``); it may not
                replace a field ``observe`` computes (``loss``, ``step_time_s``, ...).
            local_grad_norms: every rank's gradient norm before the data-parallel reduction,
                in rank order; a gradient anomaly names the rank it came from (origin_rank).
            data_time_s: seconds between the previous step's end and this step's start
                (fetching the batch, other host work): ``data_bound``, ``throughput_drop``.
            batch: the step's batch, ``basics.batch_identity.identity(...)``: its anomalies
                carry it, and a withheld one enters ``bad_batches.jsonl``.
            skip_reason: why the update was withheld, where not for its own anomalies:
                ``"known_bad_batch"`` (``known_bad_batch`` said so before the update).
            batch_indices: the step's sample indices, where the loop knows them (its own
                sampler): added to ``batch`` (the adapter's fingerprint), which names them.

        Returns the anomalies found at this step (empty when healthy); an anomaly whose
        ``stops`` is true asks the loop to stop after this step.

        Raises ValueError for a step or steps that is not a positive int (epoch_step and
        steps_per_epoch: nor None, the step past the epoch's end) or an ``extra``
        that clashes with a computed field, TypeError for a value that is not a number.
        """
        observation = StepObservation.from_arguments(
            step=step, epoch=epoch, loss=loss, lr=lr, grad_norm=grad_norm,
            grads_finite=grads_finite, lr_groups=lr_groups, skipped=skipped, steps=steps,
            layer_grad_norms=layer_grad_norms, extra=extra, local_grad_norms=local_grad_norms,
            data_time_s=data_time_s, epoch_step=epoch_step, steps_per_epoch=steps_per_epoch,
            batch=with_indices(batch, batch_indices), skip_reason=skip_reason)
        self._ensure_started()
        # a loop that never called start(): the state now is already this step's
        self._begin_training(after_step=step)
        now = self._timing.fill(observation, self._current.segment, step_time_s=step_time_s,
                                batch_size=batch_size or self.settings.batch_size)
        self._hangs.beat(now, step)
        self._hangs.phase(BEFORE_STEP, step + 1)
        found = self._process(observation)
        if observation.segment_step == 1 and observation.loss is None \
                and observation.grad_norm is None:
            self.unwatched(NOTHING_OBSERVED)
        self._stops.check_signal()
        self._stops.check_sink_error()
        return found

    def end_step(self, *, step: int, state: Mapping[str, Any] | None = None,
                 replicas: Any = None, stop_asked: bool = False,
                 work_time_s: float | None = None, **fields: Any) -> list[Anomaly]:
        """Everything a step's end does, the one protocol of every adapter and trainer:
        ``observe(step=step, **fields)``, the ``state`` record (``state``: the arguments of
        ``observe_state``, on a state step), then, on several ranks, the exchange that settles
        the stops, rewinds, stragglers and (every ``consistency_interval`` steps) the
        replicas of ``replicas`` (what ``FrameworkHooks.fingerprinter`` reads); on one rank
        the rewind is settled alone. Last, the protected step gets its next limits.
        ``stop_asked``: something else asked the framework to stop after this step (another
        callback's ``request_stop()``): every rank stops with it.
        ``work_time_s``: this rank's own work in the step before its collective, as the
        adapter measures it (the straggler's cause, detectors/slow_cause.py).

        The exchange runs even when a sink fails under ``on_sink_error="raise"``, since the
        other ranks wait in it: that ``SinkError`` is raised after it, the segment already
        stopping. Returns the step's anomalies, those the exchange found included; one whose
        ``stops`` is true (or ``stop_requested``) ends the loop after this step.
        """
        found: list[Anomaly] = []
        error: SinkError | None = None
        try:
            found += self.observe(step=step, **fields)
            if state is not None:
                found += self.observe_state(**state)
        except SinkError as exc:
            error = exc
        if stop_asked:
            self.request_stop()
        history = self.responder.history
        row = self.job.row(history[-1] if history else None, self.responder.hardware,
                           found) if self._sync.exchanging else None
        self._hangs.phase(EXCHANGE, step)
        after = self._sync.after_step(step, data_time_s=fields.get("data_time_s"),
                                      step_time_s=fields.get("step_time_s"), state=replicas,
                                      job_row=row, work_time_s=work_time_s)
        self._hangs.phase(BEFORE_STEP, step + 1)
        self.job.step(step, self._sync.job_rows, found, after, self._sync.slow)
        found += after
        self._push_limits()
        if error is not None:
            raise error
        return found

    def weights(self, scale: WeightScale | None, *, lr: float | None = None) -> None:
        """The trained weights' scale (L2 norm, element count, how the optimizer scales an
        update: ``detectors/update_size.py``), which the next updates are judged against
        (``max_update_ratio``); the protected step gets the new limits now. ``lr``: the LR
        the next step applies, when known (before the first step). Adapters call it when
        training begins and as the weights are measured again."""
        rule = next((d for d in self.detectors if isinstance(d, LrAnomalyDetector)), None)
        if rule is None:
            return
        rule.weights(scale, lr)
        self.skips.refresh()
        self._push_limits()

    @property
    def step_limits(self) -> SkipLimits:
        """The limits the next step's update is withheld above (the spike and LR rules'
        windows; ``inf`` where none): what ``FrameworkHooks.push_limits`` is handed."""
        return self.skips.limits

    def _push_limits(self) -> None:
        if self.framework.push_limits is not None:
            self.framework.push_limits(self.skips.limits)

    def observe_state(self, *, step: int, weight_norm: float, update_norm: float,
                      layers: Mapping[str, Mapping[str, float]],
                      activations: Mapping[str, Mapping[str, float]] | None = None
                      ) -> list[Anomaly]:
        """A ``state`` record of the model after ``step`` (docs/log-format.md#state): the
        norms of the weights and of the update, per layer ``{weight_norm, update_norm,
        update_ratio, grad_norm, m_norm, v_norm}``. Returns the anomalies found in it."""
        self._ensure_started()
        return self._state.observe(step=step, weight_norm=weight_norm,
                                   update_norm=update_norm, layers=layers,
                                   activations=activations)

    def notice(self, message: str, **fields: Any) -> None:
        """Write a ``notice`` record (said on every rank's console too)."""
        self._ensure_started()
        self._writer.emit(records.NOTICE, {Notice.MESSAGE: message, **fields})

    def unwatched(self, fix: str) -> None:
        """Say, once per segment, that mindwatch cannot watch this run as it is set up, and
        ``fix``: a view never calls such a segment HEALTHY (``Notice.UNWATCHED``)."""
        segment = self._current.segment
        if segment.unwatched:
            return
        segment.unwatched = True
        self.notice(f"mindwatch cannot watch this run: {fix}", **{Notice.UNWATCHED: fix})

    def end_epoch(self, evaluation: Mapping[str, float | None] | None = None) -> None:
        """Emit the pending epoch's record (mean loss, convergence against the last one);
        ``evaluation``: metric name -> value of an evaluation at this epoch's end."""
        fields = self.loss_stats.end_epoch()
        if fields is not None:
            if evaluation:
                fields[Epoch.EVAL] = dict(evaluation)
            self._writer.emit(records.EPOCH, fields)

    def step_begins(self, step: int) -> None:
        """The framework starts ``step`` now, its batch in hand: a hang from here on is in
        the step (its computation or collectives), not before it (heartbeats only)."""
        self._hangs.phase(IN_STEP, step)

    def evaluating(self) -> None:
        """Work that is no training step made progress (an evaluation batch between epochs):
        the hang watchdog counts it as life, without taking it for a step's pace."""
        self._hangs.progress(self.clock.perf_counter())
        self._hangs.phase(EVALUATING, self.last_step)

    def request_stop(self) -> None:
        """Stop after this step, on every rank (reason ``user_request``)."""
        self._stops.request_stop()

    def stop_code(self) -> int:
        """This rank's own wish to stop, as a number to share with the other ranks."""
        return self._ranks.stop_code()

    def observe_peers(self, *, step: int, stop_codes: Sequence[int] | np.ndarray,
                      data_times: Sequence[float] | np.ndarray,
                      step_time_s: float | None = None,
                      middles: np.ndarray | None = None) -> list[Anomaly]:
        """What every rank said after ``step``: stops to follow, stragglers (one entry per
        rank: lists, or the exchange's numpy arrays; ``middles``: what the ranks' straggler
        rules shared, ``Exchange.middles``)."""
        return self._ranks.observe_peers(step=step, stop_codes=stop_codes,
                                         data_times=data_times, step_time_s=step_time_s,
                                         middles=middles)

    def settle_rewind(self, *, step: int, wishes: Sequence[RewindWish] | None = None,
                      touched: bool | None = None) -> RewindEvent | None:
        """After ``observe`` (and, on several ranks, after the exchange): carry out this
        step's rewind or take a snapshot that is due (on_anomaly "rewind"; otherwise a
        no-op); see ``RankDecisions.settle_rewind`` for the arguments."""
        return self._ranks.settle_rewind(step=step, wishes=wishes, touched=touched)

    def submit_hardware(self, sample: HardwareSample) -> None:
        """A hardware sample from any thread: its record now, its findings at the next step
        end (on the training thread)."""
        self._hardware.submit(sample)

    def observe_hardware(self, sample: HardwareSample) -> list[Anomaly]:
        """A hardware sample taken on the training thread (custom loops, tests)."""
        self._ensure_started()
        return self._hardware.observe(sample)

    # -- the pipeline -------------------------------------------------------------------------
    def _process(self, obs: StepObservation) -> list[Anomaly]:
        if obs.epoch is not None and obs.epoch != self.loss_stats.epoch:
            self.end_epoch()
            self.loss_stats.epoch = obs.epoch
        self.loss_stats.add(obs.loss, obs.steps, withheld=obs.skipped)
        self._current.segment.last_step = obs.step
        interval = self.settings.layer_norms_interval
        layers_due = obs.step // interval > (obs.step - obs.steps) // interval
        record = obs.to_record(loss_smooth=self.loss_stats.smooth, with_layers=layers_due)
        self._writer.emit(records.STEP, record, time=obs.time)
        self.responder.remember_step(record, obs.layer_grad_norms)
        found = [anomaly for detector in self.detectors for anomaly in detector.update(obs)]
        found, skip_notice = self.skips.review(obs, found, self.framework.unprotected)
        if skip_notice is not None:
            self.notice(skip_notice)
        found = self._replays.review(obs, self.peers.attribute(obs, found))
        found, said = self.bad_batches.review(obs, found)
        if said is not None:
            self.notice(said)
        # the sampler thread's findings held for this step end are acted on with the step's
        # own, in one write: the console shows them as one event when they share the step
        pending = self._actions.take_pending() if self._current.segment.pending else []
        self._actions.act(self.rewinds.review(obs.step, found) + pending)  # "rewind": settle
        found.extend(pending)
        self._hardware.drain_messages()
        return found

    def state_dict(self) -> dict[str, Any]:
        """What a resumed run needs to keep its history (pipeline/history.py)."""
        return history.save(detectors=self.detectors, loss_stats=self.loss_stats,
                            skips=self.skips, rewinds=self.rewinds, last_step=self.last_step)

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore ``state_dict()``'s output; raises ValueError when it came from a monitor
        with a different set of detectors."""
        segment = self._current.segment
        self._resumed = None                 # given explicitly: it replaces the log's history
        segment.last_step = history.restore(
            state, detectors=self.detectors, loss_stats=self.loss_stats, skips=self.skips,
            rewinds=self.rewinds, last_step=segment.last_step)
        self._push_limits()
