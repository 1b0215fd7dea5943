"""The framework-free monitor: observation -> detectors -> policy -> actions, and every record
to the sinks. Adapters (``mindwatch.mindspore``) feed it plain numbers and carry out the
actions that need a framework through the hooks they set (checkpoint, resume hint)."""
from __future__ import annotations

import os
import platform
import socket
import sys
import threading
from typing import Any, Callable, Dict, List, Mapping, Optional, TextIO

from . import records
from .anomaly import PEER_STOP, Anomaly
from .clock import Clock, SystemClock
from .detectors import Detector, build_detectors
from .loss_stats import LossStats
from .observation import HardwareSample, StepObservation
from .peers import USER_STOP, Peers, stop_code
from .policy import Policy
from .rank import rank_from_env
from .responder import Responder
from .run_dir import prepare
from .settings import MonitorSettings
from .sinks.base import Sink
from .sinks.console import ConsoleSink
from .sinks.factory import open_sinks
from .version import __version__


def _as_float(name: str, value: Any) -> Optional[float]:
    """Python float from a number, numpy scalar or 0-d tensor; None stays None."""
    if value is None:
        return None
    try:
        return float(value)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"{name} must be a number or None; got {type(value).__name__}") from exc


class Monitor:
    """Records one training run of one rank. ``observe`` a step, ``close`` at the end."""

    def __init__(self, log_dir: str, *, rank: Optional[int] = None,
                 world_size: Optional[int] = None, clock: Optional[Clock] = None,
                 stream: Optional[TextIO] = None, versions: Optional[Mapping[str, str]] = None,
                 local_rank: Optional[int] = None, summary_event_class: Any = None,
                 **settings: Any):
        self.settings = MonitorSettings.from_kwargs(**settings)
        env = rank_from_env()
        self.rank = env.rank if rank is None else rank
        self.world_size = env.world_size if world_size is None else world_size
        self.local_rank = env.local_rank if local_rank is None else local_rank
        self._summary_event_class = summary_event_class
        if self.settings.mindinsight and summary_event_class is None:
            raise ValueError("mindinsight=True writes MindSpore summary files and needs "
                             "MindSpore's protobuf classes: use mindwatch.mindspore.TrainMonitor "
                             "(pip install mindspore), or leave mindinsight off")
        self.log_dir = os.fspath(log_dir) if isinstance(log_dir, os.PathLike) else log_dir
        self.log_path = prepare(self.log_dir, self.rank, self.settings.resume)
        self.clock: Clock = clock or SystemClock()
        self.versions = {"mindwatch": __version__, "mindspore": None,
                         "python": platform.python_version(), **(versions or {})}
        self.policy = Policy(self.settings.policies)
        self.peers = Peers(rank=self.rank, world_size=self.world_size, policy=self.policy,
                           straggler_window=self.settings.straggler_window,
                           straggler_factor=self.settings.straggler_factor)
        self.detectors: List[Detector] = build_detectors(self.settings)
        self.console = ConsoleSink(
            rank=self.rank, print_interval=self.settings.print_interval, stream=stream,
            verbose=self.rank == 0 or self.settings.print_all_ranks)
        self.sinks: List[Sink] = self._open_sinks()
        # the adapter sets responder.checkpointer / .resume_snippet / .notes
        self.responder = Responder(log_dir=self.log_dir, rank=self.rank, policy=self.policy)
        self.loss_stats = LossStats(self.settings.loss_smoothing)
        # run state
        self.stop_requested: Optional[Anomaly] = None
        self.anomalies: List[Anomaly] = []
        self.last_step = 0
        self._started = False
        self._closed = False
        # Timing starts at construction, so a custom loop's first step has a duration; an
        # explicit start() (the MindSpore adapter's, at train begin) restarts it.
        self._start_perf = self._last_perf = self.clock.perf_counter()
        self._lock = threading.RLock()       # the sampler thread writes records too
        self._pending: List[Anomaly] = []     # hardware findings awaiting the training thread
        self._sampler = None
        self.framework_memory_reader: Optional[Callable[[], Dict[str, Any]]] = None

    # -- life cycle -----------------------------------------------------------------------
    def _open_sinks(self) -> List[Sink]:
        return open_sinks(self.settings, log_dir=self.log_dir, log_path=self.log_path,
                          rank=self.rank, local_rank=self.local_rank, console=self.console,
                          summary_event_class=self._summary_event_class)

    def start(self, *, total_steps: Optional[int] = None, **run_info: Any) -> None:
        """Write the ``run`` record now and restart the step timer.

        After ``close`` this begins a new run segment appended to the same log (a second
        ``model.train`` call); detector history and the loss average carry over.
        """
        if self._closed:
            self.sinks = self._open_sinks()
            self._closed = self._started = False
            self.stop_requested = None
        if not self._started:
            self._start_perf = self._last_perf = self.clock.perf_counter()
        self._ensure_started(total_steps=total_steps, **run_info)

    def _ensure_started(self, *, total_steps: Optional[int] = None, **run_info: Any) -> None:
        if self._closed:
            raise RuntimeError("this monitor is closed; call start() to append a new run "
                               "segment to its log")
        if self._started:
            return
        self._started = True
        self.console.total_steps = total_steps
        self._start_hardware()
        self._emit(records.RUN, schema=records.SCHEMA_VERSION, world_size=self.world_size,
                   host=socket.gethostname(), pid=os.getpid(), config=self.settings.as_record(),
                   versions=self.versions, log_path=self.log_path, total_steps=total_steps,
                   argv=list(sys.argv), **run_info)
        if self._sampler is not None:
            self._sampler.start()

    def _start_hardware(self) -> None:
        if self.settings.hardware_interval_s is None or self._sampler is not None:
            return
        from .hardware.sampler import HardwareSampler, default_probes
        self._sampler = HardwareSampler(
            interval_s=self.settings.hardware_interval_s, on_sample=self.submit_hardware,
            **default_probes(all_devices=self.settings.all_devices,
                             framework_reader=self.framework_memory_reader))

    def _stop_hardware(self) -> None:
        if self._sampler is not None:
            self._sampler.close()
            self._drain_sampler_messages()
            self._sampler = None

    def close(self, reason: Optional[str] = None, error: Optional[str] = None) -> None:
        """End the run: the last epoch's record, an ``end`` record, sinks closed. Idempotent."""
        if self._closed:
            return
        self._ensure_started()
        self._stop_hardware()
        self._act_on_pending()
        self.end_epoch()
        if reason is None:
            reason = "error" if error else ("stopped" if self.stop_requested else "completed")
        if reason not in records.END_REASONS:
            raise ValueError(f"reason must be one of {records.END_REASONS}; got {reason!r}")
        self._emit(records.END, reason=reason, steps=self.last_step,
                   elapsed_s=self.clock.perf_counter() - self._start_perf, error=error,
                   stopped_by=self._stop_summary())
        self._closed = True
        for sink in self.sinks:
            sink.close()

    @property
    def closed(self) -> bool:
        return self._closed

    # -- inputs -----------------------------------------------------------------------------
    def observe(self, *, step: int, loss: Any = None, lr: Any = None, grad_norm: Any = None,
                epoch: Optional[int] = None, step_time_s: Optional[float] = None,
                skipped: bool = False, steps: int = 1, batch_size: Optional[int] = None,
                grads_finite: Optional[bool] = None, lr_groups: Optional[List[Any]] = None,
                layer_grad_norms: Optional[Mapping[str, Any]] = None,
                extra: Optional[Mapping[str, Any]] = None) -> List[Anomaly]:
        """Record one step (or ``steps`` steps ending at ``step``); returns its anomalies."""
        if isinstance(step, bool) or not isinstance(step, int) or step < 1:
            raise ValueError(f"step must be a positive int (1-based global step); got {step!r}")
        if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
            raise ValueError(f"steps must be a positive int; got {steps!r}")
        self._ensure_started()
        now = self.clock.perf_counter()
        if step_time_s is None:
            step_time_s = (now - self._last_perf) / steps
        self._last_perf = now
        batch_size = batch_size or self.settings.batch_size
        samples_per_s = batch_size / step_time_s if batch_size and step_time_s else None
        observation = StepObservation(
            step=step, epoch=epoch, loss=_as_float("loss", loss), lr=_as_float("lr", lr),
            grad_norm=_as_float("grad_norm", grad_norm), grads_finite=grads_finite,
            lr_groups=None if lr_groups is None else [_as_float("lr_groups", v) for v in lr_groups],
            step_time_s=step_time_s, samples_per_s=samples_per_s, skipped=bool(skipped),
            steps=steps, time=self.clock.time(),
            layer_grad_norms=None if layer_grad_norms is None else
            {name: _as_float("layer_grad_norms", v) for name, v in layer_grad_norms.items()},
            extra=dict(extra or {}))
        return self._process(observation)

    def submit_hardware(self, sample: HardwareSample) -> None:
        """From the sampler thread: the ``hardware`` record is written now, so a hung step
        still leaves samples behind; what its detectors find waits for the training thread
        (the next ``observe``), since a checkpoint must not race the optimizer update."""
        with self._lock:
            if self._closed or not self._started:
                return
            record = records_from_hardware(sample)
            self.responder.hardware = record
            self._emit(records.HARDWARE, _time=sample.time, **record)
            for detector in self.detectors:
                self._pending.extend(detector.update_hardware(sample))

    def observe_hardware(self, sample: HardwareSample) -> List[Anomaly]:
        """A hardware sample taken on the training thread (custom loops, tests)."""
        self._ensure_started()
        self.submit_hardware(sample)
        return self._act_on_pending()

    def _act_on_pending(self) -> List[Anomaly]:
        with self._lock:
            found, self._pending = self._pending, []
        for anomaly in found:
            if anomaly.step is None:
                anomaly.step = self.last_step or None
        self._act(found)
        return found

    def _drain_sampler_messages(self) -> None:
        if self._sampler is not None:
            for message in self._sampler.pop_new_messages():
                self._emit(records.NOTICE, message=message, source="hardware")

    def notice(self, message: str, **fields: Any) -> None:
        self._ensure_started()
        self._emit(records.NOTICE, message=message, **fields)

    def end_epoch(self) -> None:
        """Emit the pending epoch's record (mean loss, convergence against the last one)."""
        fields = self.loss_stats.end_epoch()
        if fields is not None:
            self._emit(records.EPOCH, **fields)

    # -- the pipeline -------------------------------------------------------------------------
    def _process(self, obs: StepObservation) -> List[Anomaly]:
        if obs.epoch is not None and obs.epoch != self.loss_stats.epoch:
            self.end_epoch()
            self.loss_stats.epoch = obs.epoch
        self.loss_stats.add(obs.loss, obs.steps)
        self.last_step = obs.step
        record = dict(step=obs.step, epoch=obs.epoch, loss=obs.loss,
                      loss_smooth=self.loss_stats.smooth,
                      lr=obs.lr, grad_norm=obs.grad_norm, step_time_s=obs.step_time_s,
                      skipped=obs.skipped, steps_covered=obs.steps,
                      samples_per_s=obs.samples_per_s)
        if obs.lr_groups is not None:
            record["lr_groups"] = obs.lr_groups
        if obs.layer_grad_norms is not None:
            self.responder.layer_norms = (obs.step, obs.layer_grad_norms)
            interval = self.settings.layer_norms_interval
            if obs.step // interval > (obs.step - obs.steps) // interval:
                record["layer_grad_norms"] = obs.layer_grad_norms
        record.update(obs.extra)
        self._emit(records.STEP, _time=obs.time, **record)
        self.responder.history.append(record)
        found: List[Anomaly] = []
        for detector in self.detectors:
            found.extend(detector.update(obs))
        self._act(found)
        if self._pending:
            found.extend(self._act_on_pending())
        self._drain_sampler_messages()
        return found

    def _act(self, found: List[Anomaly]) -> None:
        self.responder.respond(found, self.last_step)
        for anomaly in found:
            if anomaly.stops and self.stop_requested is None:
                self.stop_requested = anomaly
            self.anomalies.append(anomaly)
            self._emit(records.ANOMALY, anomaly=anomaly.kind, step=anomaly.step,
                       value=anomaly.value, threshold=anomaly.threshold, message=anomaly.message,
                       actions=anomaly.actions, checkpoint=anomaly.checkpoint,
                       report=anomaly.report)

    def state_dict(self) -> Dict[str, Any]:
        """What a resumed run needs to keep its history: detector windows, loss average."""
        return {**self.loss_stats.state_dict(), "last_step": self.last_step,
                "detectors": [d.state_dict() for d in self.detectors]}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        detectors = state.get("detectors", [])
        if len(detectors) != len(self.detectors):
            raise ValueError(f"state holds {len(detectors)} detectors, this monitor has "
                             f"{len(self.detectors)}; it was saved by a different version")
        for detector, detector_state in zip(self.detectors, detectors):
            detector.load_state_dict(detector_state)
        self.loss_stats.load_state_dict(state)
        self.last_step = state.get("last_step", self.last_step)

    def _stop_summary(self) -> Optional[Dict[str, Any]]:
        if self.stop_requested is None:
            return None
        if self.peers.origin is not None:
            rank, reason = self.peers.origin
            return {"anomaly": reason, "step": self.stop_requested.step, "rank": rank}
        return {"anomaly": self.stop_requested.kind, "step": self.stop_requested.step,
                "rank": self.rank}

    # -- several ranks ------------------------------------------------------------------------
    def stop_code(self) -> int:
        """This rank's wish to stop, as a number to share with the other ranks."""
        if self.stop_requested is None:
            return 0
        return stop_code(self.stop_requested.kind if self.stop_requested.kind != PEER_STOP
                         else None)

    def request_stop(self) -> None:
        """The user (or another callback) asked to stop: every rank stops after this step."""
        if self.stop_requested is None:
            self.stop_requested = Anomaly(USER_STOP, self.last_step or None, None, None,
                                          "stop requested by the user", actions=["stop"])

    def observe_peers(self, *, step: int, stop_codes: List[int], data_times: List[float],
                      step_time_s: Optional[float] = None) -> List[Anomaly]:
        """What the other ranks said after ``step``: stops to follow, stragglers."""
        found = self.peers.findings(step=step, stop_codes=stop_codes, data_times=data_times,
                                    step_time_s=step_time_s,
                                    stopping=self.stop_requested is not None)
        self._act(found)
        return found

    def _emit(self, kind: str, _time: Optional[float] = None, **fields: Any) -> None:
        record = {"kind": kind, "rank": self.rank,
                  "time": self.clock.time() if _time is None else _time, **fields}
        with self._lock:
            for sink in self.sinks:
                sink.write(record)


def records_from_hardware(sample: HardwareSample) -> Dict[str, Any]:
    return {
        "cpu_percent": sample.cpu_percent, "mem_used_gb": sample.mem_used_gb,
        "mem_available_gb": sample.mem_available_gb, "rss_gb": sample.rss_gb,
        "devices": [vars(device).copy() for device in sample.devices],
        "framework_memory": sample.framework_memory,
    }
