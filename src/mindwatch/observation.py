"""Plain, framework-free descriptions of what happened: one training step, one hardware sample.

Adapters convert tensors to Python numbers once, when they build these; everything
downstream (detectors, policy, sinks) sees only floats, ints, bools and None.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

from .records import Device, Hardware


@dataclass
class StepObservation:
    step: int                              # global step, 1-based, the last one this covers
    epoch: Optional[int] = None            # 1-based
    loss: Optional[float] = None
    lr: Optional[float] = None             # the LR applied at this step (first group)
    lr_groups: Optional[List[float]] = None  # every group's LR when the optimizer has groups
    grad_norm: Optional[float] = None      # global L2 norm before clipping
    grads_finite: Optional[bool] = None    # every gradient element finite; None: not measured
    step_time_s: Optional[float] = None    # wall seconds per training step
    samples_per_s: Optional[float] = None
    skipped: bool = False                  # the optimizer update was withheld
    steps: int = 1                         # training steps this observation covers (sink mode)
    time: float = 0.0                      # Unix seconds
    layer_grad_norms: Optional[Dict[str, float]] = None
    extra: Dict[str, Any] = field(default_factory=dict)


@dataclass
class DeviceSample:
    type: str                              # "npu" or "gpu"
    index: int
    util_percent: Optional[float] = None
    mem_used_mb: Optional[float] = None
    mem_total_mb: Optional[float] = None
    temp_c: Optional[float] = None
    power_w: Optional[float] = None


@dataclass
class HardwareSample:
    time: float
    cpu_percent: Optional[float] = None
    mem_used_gb: Optional[float] = None
    mem_available_gb: Optional[float] = None
    rss_gb: Optional[float] = None
    devices: List[DeviceSample] = field(default_factory=list)
    framework_memory: Optional[Dict[str, Any]] = None

    def to_record(self) -> Dict[str, Any]:
        """The fields of this sample's ``hardware`` record."""
        return {
            Hardware.CPU_PERCENT: self.cpu_percent, Hardware.MEM_USED_GB: self.mem_used_gb,
            Hardware.MEM_AVAILABLE_GB: self.mem_available_gb, Hardware.RSS_GB: self.rss_gb,
            Hardware.DEVICES: [{
                Device.TYPE: d.type, Device.INDEX: d.index, Device.UTIL_PERCENT: d.util_percent,
                Device.MEM_USED_MB: d.mem_used_mb, Device.MEM_TOTAL_MB: d.mem_total_mb,
                Device.TEMP_C: d.temp_c, Device.POWER_W: d.power_w} for d in self.devices],
            Hardware.FRAMEWORK_MEMORY: self.framework_memory,
        }
