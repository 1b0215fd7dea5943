"""Every setting of a monitor, validated once, at construction.

``MonitorSettings`` is keyword-only so call sites read as documentation, and validates in
``__post_init__`` so a typo fails before training starts, naming the argument and what it
accepts. Detector-specific knobs live here too, flat, so one ``Monitor(**settings)`` call
configures everything and the ``run`` record can store the effective values.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any, Dict, Mapping, Optional, Union

from .policy import resolve_policies


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def check_int(name: str, value: Any, minimum: int = None, optional: bool = False) -> None:
    if value is None and optional:
        return
    if not _is_int(value):
        raise TypeError(f"{name} must be an int{' or None' if optional else ''}; "
                        f"got {type(value).__name__} {value!r}")
    if minimum is not None and value < minimum:
        raise ValueError(f"{name} must be >= {minimum}; got {value}")


def check_number(name: str, value: Any, *, low: float = None, high: float = None,
                 low_open: bool = False, high_open: bool = False, optional: bool = False) -> None:
    if value is None and optional:
        return
    if not _is_number(value):
        raise TypeError(f"{name} must be a number{' or None' if optional else ''}; "
                        f"got {type(value).__name__} {value!r}")
    if not math.isfinite(value):
        raise ValueError(f"{name} must be finite; got {value}")
    if low is not None and (value <= low if low_open else value < low):
        raise ValueError(f"{name} must be {'>' if low_open else '>='} {low}; got {value}")
    if high is not None and (value >= high if high_open else value > high):
        raise ValueError(f"{name} must be {'<' if high_open else '<='} {high}; got {value}")


def check_bool(name: str, value: Any) -> None:
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be True or False; got {type(value).__name__} {value!r}")


@dataclass(kw_only=True)
class MonitorSettings:
    # console
    print_interval: int = 10                 # steps between console lines
    print_all_ranks: bool = False
    # step metrics
    loss_smoothing: float = 0.9              # EMA weight of the history in loss_smooth
    batch_size: Optional[int] = None         # samples per step and rank; None: from the dataset
    # absolute gradient bounds (global L2 norm, pre-clip)
    grad_explode: float = 100.0
    grad_vanish: float = 1e-6
    grad_vanish_steps: int = 3               # consecutive steps below grad_vanish before it counts
    # adaptive spike rules: robust z-score of log(value) against the last spike_window steps
    spike_window: int = 64
    spike_warmup: int = 32                   # steps of history before a spike rule may fire
    loss_spike_z: float = 6.0
    loss_spike_ratio: float = 1.5            # and at least this multiple of the window median
    grad_spike_z: float = 6.0
    grad_spike_ratio: float = 5.0            # benign transformer grad-norm jumps reach 3-4x
    # divergence: mean loss of the recent half-window this much above the older half
    loss_rising_window: int = 40
    loss_rising_min: float = 0.1
    # learning rate: an upward jump by more than this factor in one step
    lr_jump_factor: float = 10.0
    # several ranks: a rank whose pre-step time (data, host work) is this many times the
    # others', as a median over the window, is a straggler
    straggler_window: int = 20
    straggler_factor: float = 2.0
    # per-layer gradient norms (wrap(per_layer_norms=True)) go into the log every N steps
    layer_norms_interval: int = 50
    # what to do
    on_anomaly: Union[None, str, Mapping[str, str]] = None
    # hardware
    max_temperature_c: float = 85.0
    overheat_samples: int = 3                # consecutive samples at/above the limit
    memory_pressure_device: float = 0.95     # device memory used / total
    memory_pressure_host: float = 0.05       # host memory available / total, below it
    hardware_interval_s: Optional[float] = 2.0
    all_devices: bool = False                # sample every device, not only this rank's
    # optional sinks
    tensorboard: bool = False
    mindinsight: bool = False
    prometheus_port: Optional[int] = None
    # an existing run log in log_dir is refused unless resume=True appends a new run to it
    resume: bool = False
    policies: Dict[str, str] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        check_int("print_interval", self.print_interval, minimum=1)
        check_bool("print_all_ranks", self.print_all_ranks)
        check_number("loss_smoothing", self.loss_smoothing, low=0.0, high=1.0, high_open=True)
        check_int("batch_size", self.batch_size, minimum=1, optional=True)
        check_number("grad_explode", self.grad_explode, low=0.0, low_open=True)
        check_number("grad_vanish", self.grad_vanish, low=0.0)
        if self.grad_vanish >= self.grad_explode:
            raise ValueError(f"grad_vanish ({self.grad_vanish}) must be below grad_explode "
                             f"({self.grad_explode})")
        check_int("grad_vanish_steps", self.grad_vanish_steps, minimum=1)
        check_int("spike_window", self.spike_window, minimum=4)
        check_int("spike_warmup", self.spike_warmup, minimum=2)
        if self.spike_warmup > self.spike_window:
            raise ValueError(f"spike_warmup ({self.spike_warmup}) must not exceed spike_window "
                             f"({self.spike_window})")
        for name in ("loss_spike_z", "grad_spike_z"):
            check_number(name, getattr(self, name), low=0.0, low_open=True)
        for name in ("loss_spike_ratio", "grad_spike_ratio", "lr_jump_factor"):
            check_number(name, getattr(self, name), low=1.0, low_open=True)
        check_int("loss_rising_window", self.loss_rising_window, minimum=4)
        check_number("loss_rising_min", self.loss_rising_min, low=0.0, low_open=True)
        check_int("layer_norms_interval", self.layer_norms_interval, minimum=1)
        check_int("straggler_window", self.straggler_window, minimum=2)
        check_number("straggler_factor", self.straggler_factor, low=1.0, low_open=True)
        self.policies = resolve_policies(self.on_anomaly)
        check_number("max_temperature_c", self.max_temperature_c, low=0.0, low_open=True)
        check_int("overheat_samples", self.overheat_samples, minimum=1)
        check_number("memory_pressure_device", self.memory_pressure_device, low=0.0,
                     low_open=True, high=1.0)
        check_number("memory_pressure_host", self.memory_pressure_host, low=0.0, high=1.0,
                     high_open=True)
        check_bool("all_devices", self.all_devices)
        check_number("hardware_interval_s", self.hardware_interval_s, low=0.0, low_open=True,
                     optional=True)
        check_bool("tensorboard", self.tensorboard)
        check_bool("mindinsight", self.mindinsight)
        check_int("prometheus_port", self.prometheus_port, minimum=0, optional=True)
        if self.prometheus_port is not None and self.prometheus_port > 65535:
            raise ValueError(f"prometheus_port must be <= 65535; got {self.prometheus_port}")
        check_bool("resume", self.resume)

    @classmethod
    def from_kwargs(cls, **kwargs: Any) -> "MonitorSettings":
        """Like the constructor, with an error for unknown names that lists the known ones."""
        known = {f.name for f in dataclasses.fields(cls) if f.init}
        unknown = sorted(set(kwargs) - known)
        if unknown:
            raise TypeError(f"unknown setting(s) {', '.join(unknown)}; "
                            f"known settings: {', '.join(sorted(known))}")
        return cls(**kwargs)

    def as_record(self) -> Dict[str, Any]:
        """The effective settings, for the ``run`` record (policies fully expanded)."""
        values = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        values.pop("on_anomaly")
        return values
