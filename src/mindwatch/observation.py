"""Plain, framework-free descriptions of what happened: one training step, one hardware sample.

Adapters convert tensors to Python numbers once, when they build these; everything
downstream (detectors, policy, sinks) sees only floats, ints, bools and None.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .basics.numbers import to_number
from .records import Common, Device, Hardware, Step

# Fields a step record computes itself; ``extra`` may add others (loss_scale, data_time_s).
_OWN_STEP_FIELDS = frozenset((*Common.REQUIRED, *Step.REQUIRED, Step.STEPS_COVERED,
                              Step.EPOCH_STEP, Step.STEPS_PER_EPOCH, Step.SAMPLES_PER_S,
                              Step.TOKENS_PER_S, Step.MFU,
                              Step.LR_GROUPS, Step.LAYER_GRAD_NORMS, Step.ETA_S,
                              Step.SKIP_REASON))


@dataclass
class StepObservation:
    step: int                              # global step, 1-based, the last one this covers
    epoch: int | None = None            # 1-based
    epoch_step: int | None = None       # 1-based step within the epoch (of ``step``)
    steps_per_epoch: int | None = None  # the epoch's length, with epoch_step
    loss: float | None = None
    lr: float | None = None             # the LR applied at this step (first group)
    lr_groups: list[float | None] | None = None  # every group's LR, when there are groups
    grad_norm: float | None = None      # global L2 norm before clipping
    grads_finite: bool | None = None    # every gradient element finite; None: not measured
    step_time_s: float | None = None    # wall seconds per training step
    samples_per_s: float | None = None  # this rank's, per second of training
    tokens_per_s: float | None = None   # with tokens_per_sample (throughput.py)
    mfu: float | None = None            # fraction of the device's peak FLOP/s
    skipped: bool = False                  # the optimizer update was withheld
    steps: int = 1                         # training steps this observation covers (sink mode)
    time: float = 0.0                      # Unix seconds
    layer_grad_norms: dict[str, float] | None = None
    # every rank's gradient norm before the data-parallel reduction, in rank order
    local_grad_norms: list[float | None] | None = None
    # seconds outside the train step before it began (the batch's fetch, other callbacks)
    data_time_s: float | None = None
    segment_step: int = 1                  # observations in this run segment, this one too
    eta_s: float | None = None             # seconds to the run's last step (pipeline/timing)
    extra: dict[str, Any] = field(default_factory=dict)
    # the step's batch: {"fingerprint", "indices"} (basics/batch_identity.py); None: unknown
    batch: dict[str, Any] | None = None
    skip_reason: str | None = None         # withheld for another reason than its anomalies

    @classmethod
    def from_arguments(cls, *, step: Any, steps: Any, loss: Any, lr: Any, grad_norm: Any,
                       lr_groups: Any, layer_grad_norms: Any, extra: Any,
                       local_grad_norms: Any = None, **plain: Any) -> StepObservation:
        """From ``Monitor.observe``'s arguments, checked: every problem raises an error that
        names the argument. Timing fields are the caller's to fill in."""
        for name, value in (("step", step), ("steps", steps)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive int"
                                 f"{' (1-based global step)' if name == 'step' else ''}; "
                                 f"got {value!r}")
        _check_epoch_step(plain.get("epoch_step"), plain.get("steps_per_epoch"))
        clash = sorted(set(extra or ()) & _OWN_STEP_FIELDS)
        if clash:
            raise ValueError(f"extra must not replace the step record's own fields "
                             f"{', '.join(clash)}; pass them as arguments of observe()")
        extra = dict(extra or {})
        data_time = extra.pop(Step.DATA_TIME_S, None)       # where it was given before 1.6
        if plain.get("data_time_s") is None:
            plain["data_time_s"] = data_time
        plain["data_time_s"] = to_number(plain["data_time_s"], "data_time_s")
        return cls(step=step, steps=steps, loss=to_number(loss, "loss"), lr=to_number(lr, "lr"),
                   grad_norm=to_number(grad_norm, "grad_norm"),
                   lr_groups=None if lr_groups is None else
                   [to_number(v, "lr_groups") for v in lr_groups],
                   layer_grad_norms=_layer_norms(layer_grad_norms), extra=extra,
                   local_grad_norms=None if local_grad_norms is None else
                   [to_number(v, "local_grad_norms") for v in local_grad_norms],
                   skipped=bool(plain.pop("skipped")), **plain)

    def to_record(self, *, loss_smooth: float | None, with_layers: bool) -> dict[str, Any]:
        """The fields of this step's ``step`` record; the per-layer norms only ``with_layers``
        (they are large: logged every ``layer_norms_interval`` steps)."""
        record: dict[str, Any] = {
            Step.STEP: self.step, Step.EPOCH: self.epoch, Step.EPOCH_STEP: self.epoch_step,
            Step.LOSS: self.loss,
            Step.LOSS_SMOOTH: loss_smooth, Step.LR: self.lr, Step.GRAD_NORM: self.grad_norm,
            Step.STEP_TIME_S: self.step_time_s, Step.SKIPPED: self.skipped,
            Step.STEPS_COVERED: self.steps, Step.SAMPLES_PER_S: self.samples_per_s}
        if self.steps_per_epoch is not None:
            record[Step.STEPS_PER_EPOCH] = self.steps_per_epoch
        if self.tokens_per_s is not None:
            record[Step.TOKENS_PER_S] = self.tokens_per_s
        if self.mfu is not None:
            record[Step.MFU] = self.mfu
        if self.lr_groups is not None:
            record[Step.LR_GROUPS] = self.lr_groups
        if self.layer_grad_norms is not None and with_layers:
            record[Step.LAYER_GRAD_NORMS] = self.layer_grad_norms
        if self.data_time_s is not None:
            record[Step.DATA_TIME_S] = self.data_time_s
        if self.eta_s is not None:
            record[Step.ETA_S] = self.eta_s
        if self.skip_reason is not None:
            record[Step.SKIP_REASON] = self.skip_reason
        record.update(self.extra)
        return record


def _check_epoch_step(epoch_step: Any, steps_per_epoch: Any) -> None:
    """Both None or positive ints, the step no later than the epoch's last."""
    for name, value in (("epoch_step", epoch_step), ("steps_per_epoch", steps_per_epoch)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)
                                  or value < 1):
            raise ValueError(f"{name} must be a positive int or None; got {value!r}")
    if epoch_step is not None and steps_per_epoch is not None and epoch_step > steps_per_epoch:
        raise ValueError(f"epoch_step must be at most steps_per_epoch ({steps_per_epoch}); "
                         f"got {epoch_step}")


def _layer_norms(values: Any) -> dict[str, float] | None:
    if values is None:
        return None
    norms = {}
    for name, value in dict(values).items():
        number = to_number(value, f"layer_grad_norms[{name!r}]")
        if number is None:
            raise TypeError(f"layer_grad_norms[{name!r}] must be a number; got None")
        norms[str(name)] = number
    return norms


@dataclass
class DeviceSample:
    type: str                              # "npu" or "gpu"
    index: int
    util_percent: float | None = None
    mem_used_mb: float | None = None
    mem_total_mb: float | None = None
    temp_c: float | None = None
    power_w: float | None = None
    # the other processes on it (records.DeviceProcess), when this process is on it and the
    # tool lists them; None: not known
    others: list[dict[str, Any]] | None = None


@dataclass
class HardwareSample:
    time: float
    cpu_percent: float | None = None
    mem_used_gb: float | None = None
    mem_available_gb: float | None = None
    rss_gb: float | None = None
    devices: list[DeviceSample] = field(default_factory=list)
    framework_memory: dict[str, Any] | None = None
    # this process's part of cpu_percent, its threads' wait for a CPU since the previous
    # sample (s), the other processes that took the most (hardware/cpu_share.py)
    process_cpu_percent: float | None = None
    cpu_wait_s: float | None = None
    cpu_top: list[dict[str, Any]] | None = None
    # steps the current run segment had observed when this was taken (HardwareInput): the
    # trend rules leave out a segment's start; None: not known
    segment_steps: int | None = None

    def to_record(self) -> dict[str, Any]:
        """The fields of this sample's ``hardware`` record."""
        return {
            Hardware.CPU_PERCENT: self.cpu_percent, Hardware.MEM_USED_GB: self.mem_used_gb,
            Hardware.MEM_AVAILABLE_GB: self.mem_available_gb, Hardware.RSS_GB: self.rss_gb,
            Hardware.DEVICES: [{
                Device.TYPE: d.type, Device.INDEX: d.index, Device.UTIL_PERCENT: d.util_percent,
                Device.MEM_USED_MB: d.mem_used_mb, Device.MEM_TOTAL_MB: d.mem_total_mb,
                Device.TEMP_C: d.temp_c, Device.POWER_W: d.power_w,
                **({} if d.others is None else {Device.OTHERS: d.others})}
                for d in self.devices],
            Hardware.FRAMEWORK_MEMORY: self.framework_memory,
            Hardware.PROCESS_CPU_PERCENT: self.process_cpu_percent,
            Hardware.CPU_WAIT_S: self.cpu_wait_s, Hardware.CPU_TOP: self.cpu_top,
        }


@dataclass(frozen=True)
class ReplayOutcome:
    """A withheld step computed again by the framework's ``replay`` hook (float32 values as
    Python floats); decisions/replays.py judges it."""
    loss: float | None
    grad_norm: float | None
    healthy: bool            # within every bound the step's update was held to
