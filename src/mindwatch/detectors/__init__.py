"""Detectors: one small class per rule family (see base.Detector)."""
from .attention_logit import AttentionLogitDetector
from .base import Detector
from .grad_bounds import GradBoundsDetector
from .hardware import MemoryPressureDetector, OverheatDetector
from .loss_rising import LossRisingDetector
from .lr_anomaly import LrAnomalyDetector
from .nonfinite import NonFiniteDetector
from .spike import SpikeDetector, grad_spike, loss_spike
from .update_ratio import UpdateRatioDetector

__all__ = [
    "AttentionLogitDetector",
    "Detector",
    "GradBoundsDetector",
    "LossRisingDetector",
    "LrAnomalyDetector",
    "MemoryPressureDetector",
    "NonFiniteDetector",
    "OverheatDetector",
    "SpikeDetector",
    "UpdateRatioDetector",
    "build_detectors",
    "grad_spike",
    "loss_spike",
]


def build_detectors(settings) -> list:
    """The default rule set, configured from ``MonitorSettings``."""
    spike = dict(window=settings.spike_window, warmup=settings.spike_warmup)
    return [
        NonFiniteDetector(),
        GradBoundsDetector(explode=settings.grad_explode, vanish=settings.grad_vanish,
                           vanish_steps=settings.grad_vanish_steps),
        loss_spike(z_threshold=settings.loss_spike_z, min_ratio=settings.loss_spike_ratio,
                   **spike),
        grad_spike(z_threshold=settings.grad_spike_z, min_ratio=settings.grad_spike_ratio,
                   **spike),
        LossRisingDetector(window=settings.loss_rising_window, min_rise=settings.loss_rising_min),
        LrAnomalyDetector(jump_factor=settings.lr_jump_factor),
        OverheatDetector(max_temperature_c=settings.max_temperature_c,
                         consecutive=settings.overheat_samples),
        MemoryPressureDetector(device_fraction=settings.memory_pressure_device,
                               host_available_fraction=settings.memory_pressure_host),
        UpdateRatioDetector(factor=settings.update_ratio_factor,
                            ceiling=settings.update_ratio_ceiling),
        AttentionLogitDetector(limit=settings.max_attention_logit),
    ]
