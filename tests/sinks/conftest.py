"""A realistic record sequence for the dashboard sinks, with the scalars it must produce written
out by hand (not computed by the code under test)."""
import math

import pytest

T0 = 1_700_000_000.0
NAN, INF = math.nan, math.inf


def _step(step, time, loss, smooth, lr, grad, step_time, rate, skipped):
    return {"kind": "step", "rank": 0, "time": T0 + time, "step": step, "epoch": 1,
            "loss": loss, "loss_smooth": smooth, "lr": lr, "grad_norm": grad,
            "step_time_s": step_time, "samples_per_s": rate, "skipped": skipped,
            "steps_covered": 1}


RECORDS = [
    {"kind": "run", "rank": 0, "time": T0, "schema": 1, "world_size": 1, "host": "h", "pid": 1,
     "config": {}, "versions": {"mindwatch": "0", "mindspore": None, "python": "3"}},
    _step(1, 1.0, 2.5, 2.5, 1e-3, None, 0.5, 16.0, False),
    {"kind": "hardware", "rank": 0, "time": T0 + 1.5, "cpu_percent": 12.5, "mem_used_gb": 7.25,
     "mem_available_gb": None, "rss_gb": 1.5, "devices": [
         {"type": "npu", "index": 0, "util_percent": 50.0, "mem_used_mb": 1024.0,
          "mem_total_mb": 32768.0, "temp_c": 45.0, "power_w": 80.5},
         {"type": "npu", "index": 1, "util_percent": 75.0, "mem_used_mb": 2048.0,
          "mem_total_mb": 32768.0, "temp_c": None, "power_w": 90.25}]},
    _step(2, 2.0, NAN, 2.5, 1e-3, INF, 0.025, None, True),
    {"kind": "anomaly", "rank": 0, "time": T0 + 2.0, "anomaly": "loss_nonfinite", "step": 2,
     "value": NAN, "threshold": None, "message": "loss is NaN", "actions": ["warn"],
     "checkpoint": None, "report": None},
    {"kind": "state", "rank": 0, "time": T0 + 2.1, "step": 2, "weight_norm": 4.0,
     "update_norm": 0.0, "layers": {
         "inp": {"weight_norm": 3.0, "update_norm": 0.0, "update_ratio": 0.0, "grad_norm": INF,
                 "m_norm": 0.5, "v_norm": 0.25},
         "out": {"weight_norm": 2.5, "update_norm": 0.0, "update_ratio": 0.0,
                 "grad_norm": 1.5}},
     "activations": {"inp": {"max_abs": 3.5, "rms": 0.75}, "attn": {"max_logit": INF}}},
    _step(3, 3.0, 2.25, 2.475, 9e-4, 150.0, 0.025, 640.0, False),
    {"kind": "anomaly", "rank": 0, "time": T0 + 3.0, "anomaly": "gradient_explode", "step": 3,
     "value": 150.0, "threshold": 100.0, "message": "gradient norm 150 above 100",
     "actions": ["checkpoint", "stop"], "checkpoint": "checkpoints/anomaly_step3_rank0.ckpt",
     "report": "anomalies/step3_rank0.json"},
    {"kind": "hardware", "rank": 0, "time": T0 + 3.5, "cpu_percent": 20.0, "mem_used_gb": 7.5,
     "rss_gb": 1.75, "devices": [
         {"type": "npu", "index": 0, "util_percent": None, "mem_used_mb": 1100.0,
          "mem_total_mb": 32768.0, "temp_c": 46.0, "power_w": -INF},
         {"type": "npu", "index": 1, "util_percent": 80.0, "mem_used_mb": 2100.0,
          "mem_total_mb": 32768.0, "temp_c": 50.0, "power_w": 95.0}]},
    {"kind": "epoch", "rank": 0, "time": T0 + 3.6, "epoch": 1, "loss_mean": 2.375, "steps": 3,
     "loss_change": None, "converging": None, "nonfinite_losses": 1},
    {"kind": "notice", "rank": 0, "time": T0 + 3.7, "message": "hello"},
    {"kind": "end", "rank": 0, "time": T0 + 4.0, "reason": "stopped", "steps": 3,
     "elapsed_s": 4.0},
]

# tag -> [(step, wall time, value)]; None fields produce no point at all.
EXPECTED = {
    "train/loss": [(1, T0 + 1, 2.5), (2, T0 + 2, NAN), (3, T0 + 3, 2.25)],
    "train/loss_smooth": [(1, T0 + 1, 2.5), (2, T0 + 2, 2.5), (3, T0 + 3, 2.475)],
    "train/lr": [(1, T0 + 1, 1e-3), (2, T0 + 2, 1e-3), (3, T0 + 3, 9e-4)],
    "train/grad_norm": [(2, T0 + 2, INF), (3, T0 + 3, 150.0)],
    "train/skipped": [(1, T0 + 1, 0.0), (2, T0 + 2, 1.0), (3, T0 + 3, 0.0)],
    "time/step_time_s": [(1, T0 + 1, 0.5), (2, T0 + 2, 0.025), (3, T0 + 3, 0.025)],
    "time/samples_per_s": [(1, T0 + 1, 16.0), (3, T0 + 3, 640.0)],
    "hardware/cpu_percent": [(1, T0 + 1.5, 12.5), (3, T0 + 3.5, 20.0)],
    "hardware/mem_used_gb": [(1, T0 + 1.5, 7.25), (3, T0 + 3.5, 7.5)],
    "hardware/rss_gb": [(1, T0 + 1.5, 1.5), (3, T0 + 3.5, 1.75)],
    "hardware/npu0/util_percent": [(1, T0 + 1.5, 50.0)],
    "hardware/npu0/mem_used_mb": [(1, T0 + 1.5, 1024.0), (3, T0 + 3.5, 1100.0)],
    "hardware/npu0/temp_c": [(1, T0 + 1.5, 45.0), (3, T0 + 3.5, 46.0)],
    "hardware/npu0/power_w": [(1, T0 + 1.5, 80.5), (3, T0 + 3.5, -INF)],
    "hardware/npu1/util_percent": [(1, T0 + 1.5, 75.0), (3, T0 + 3.5, 80.0)],
    "hardware/npu1/mem_used_mb": [(1, T0 + 1.5, 2048.0), (3, T0 + 3.5, 2100.0)],
    "hardware/npu1/temp_c": [(3, T0 + 3.5, 50.0)],
    "hardware/npu1/power_w": [(1, T0 + 1.5, 90.25), (3, T0 + 3.5, 95.0)],
    "state/weight_norm": [(2, T0 + 2.1, 4.0)],
    "state/update_norm": [(2, T0 + 2.1, 0.0)],
    "state_weight_norm/inp": [(2, T0 + 2.1, 3.0)],
    "state_update_norm/inp": [(2, T0 + 2.1, 0.0)],
    "state_update_ratio/inp": [(2, T0 + 2.1, 0.0)],
    "state_grad_norm/inp": [(2, T0 + 2.1, INF)],
    "state_m_norm/inp": [(2, T0 + 2.1, 0.5)],
    "state_v_norm/inp": [(2, T0 + 2.1, 0.25)],
    "state_weight_norm/out": [(2, T0 + 2.1, 2.5)],
    "state_update_norm/out": [(2, T0 + 2.1, 0.0)],
    "state_update_ratio/out": [(2, T0 + 2.1, 0.0)],
    "state_grad_norm/out": [(2, T0 + 2.1, 1.5)],
    "activation_max_abs/inp": [(2, T0 + 2.1, 3.5)],
    "activation_rms/inp": [(2, T0 + 2.1, 0.75)],
    "activation_max_logit/attn": [(2, T0 + 2.1, INF)],
    "anomalies/loss_nonfinite": [(2, T0 + 2, 1.0)],
    "anomalies/gradient_explode": [(3, T0 + 3, 1.0)],
    "epoch/loss_mean": [(3, T0 + 3.6, 2.375)],
    "epoch/nonfinite_losses": [(3, T0 + 3.6, 1.0)],
}


def same_float32(actual, expected):
    """Equal after rounding to float32 (both file formats store float32); NaN equals NaN."""
    import numpy as np
    want = float(np.float32(expected))
    if math.isnan(want):
        return math.isnan(actual)
    return actual == want or math.isclose(actual, want, rel_tol=1e-6)


@pytest.fixture
def run_records():
    return [dict(record) for record in RECORDS]


@pytest.fixture
def expected_scalars():
    return EXPECTED


@pytest.fixture
def float32_equal():
    return same_float32
