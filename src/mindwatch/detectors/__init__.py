"""Detectors: one small class per rule family (see base.Detector)."""
from .attention_logit import AttentionLogitDetector
from .base import Detector
from .data_bound import DataBoundDetector
from .grad_bounds import GradBoundsDetector
from .hardware import MemoryPressureDetector, OverheatDetector
from .loss_rising import LossRisingDetector
from .lr_anomaly import LrAnomalyDetector
from .memory_growth import MemoryGrowthDetector
from .nonfinite import NonFiniteDetector
from .pace import Pace
from .spike import SpikeDetector, grad_spike, loss_spike
from .throughput_drop import ThroughputDropDetector
from .update_ratio import UpdateRatioDetector

__all__ = [
    "AttentionLogitDetector",
    "DataBoundDetector",
    "Detector",
    "GradBoundsDetector",
    "LossRisingDetector",
    "LrAnomalyDetector",
    "MemoryGrowthDetector",
    "MemoryPressureDetector",
    "NonFiniteDetector",
    "OverheatDetector",
    "SpikeDetector",
    "ThroughputDropDetector",
    "UpdateRatioDetector",
    "build_detectors",
    "grad_spike",
    "loss_spike",
]


def build_detectors(settings, rank: int = 0) -> list:
    """The default rule set, configured from ``MonitorSettings``; ``rank``: this process's."""
    spike = dict(window=settings.spike_window, warmup=settings.spike_warmup)
    # throughput_drop and data_bound read one set of pace windows
    pace = Pace(window=settings.pace_window, warmup=settings.trend_warmup,
                samples=settings.throughput_baseline is not None)
    return [
        NonFiniteDetector(),
        GradBoundsDetector(explode=settings.grad_explode, vanish=settings.grad_vanish,
                           vanish_steps=settings.grad_vanish_steps),
        loss_spike(z_threshold=settings.loss_spike_z, min_ratio=settings.loss_spike_ratio,
                   **spike),
        grad_spike(z_threshold=settings.grad_spike_z, min_ratio=settings.grad_spike_ratio,
                   **spike),
        LossRisingDetector(window=settings.loss_rising_window, min_rise=settings.loss_rising_min),
        LrAnomalyDetector(jump_factor=settings.lr_jump_factor, max_lr=settings.max_lr,
                          max_update_ratio=settings.max_update_ratio),
        OverheatDetector(max_temperature_c=settings.max_temperature_c,
                         consecutive=settings.overheat_samples),
        MemoryPressureDetector(device_fraction=settings.memory_pressure_device,
                               host_available_fraction=settings.memory_pressure_host),
        UpdateRatioDetector(factor=settings.update_ratio_factor,
                            ceiling=settings.update_ratio_ceiling),
        AttentionLogitDetector(limit=settings.max_attention_logit),
        ThroughputDropDetector(pace, factor=settings.throughput_drop_factor,
                               baseline=settings.throughput_baseline, rank=rank),
        DataBoundDetector(pace, share=settings.data_bound_share),
        MemoryGrowthDetector(window_s=settings.memory_growth_window_s,
                             horizon_s=settings.memory_growth_horizon_s,
                             warmup=settings.trend_warmup),
    ]
