"""The update_ratio rule alone: a layer's own band, the ceiling, one alarm per episode."""
import math

import pytest

from mindwatch import Monitor
from mindwatch.detectors import UpdateRatioDetector
from mindwatch.runlog import read_rank_log


def _layers(**ratios):
    return {layer: {"update_ratio": ratio} for layer, ratio in ratios.items()}


def _detector():
    return UpdateRatioDetector(factor=10.0, ceiling=0.3, window=20, warmup=3)


def test_a_steady_band_and_a_warm_up_raise_nothing():
    detector = _detector()
    for step, ratio in enumerate([1e-4, 2e-4, 4e-4, 8e-4, 1.2e-3, 1.1e-3, 1.3e-3, 0.9e-3],
                                 start=1):
        assert detector.update_state(step * 100, _layers(a=ratio, b=ratio / 3)) == []


def test_a_jump_out_of_its_own_band_names_the_layer():
    detector = _detector()
    for step in range(1, 6):
        assert detector.update_state(step, _layers(attn=1e-3, mlp=2e-3)) == []
    [found] = detector.update_state(6, _layers(attn=5e-2, mlp=2.1e-3))
    assert found.kind == "update_ratio" and found.step == 6
    assert found.value == 5e-2 and found.threshold == pytest.approx(1e-2)
    assert found.message.startswith("layer attn: update/weight ratio 0.05 at step 6 is 50x")
    assert detector.update_state(7, _layers(attn=6e-2, mlp=2e-3)) == []     # same episode
    assert detector.update_state(8, _layers(attn=1e-3, mlp=2e-3)) == []     # cleared
    [again] = detector.update_state(9, _layers(attn=4e-2, mlp=2e-3))
    assert again.step == 9 and "attn" in again.message


def test_the_ceiling_holds_from_the_first_record():
    [found] = _detector().update_state(100, _layers(emb=0.5, head=1e-3))
    assert found.threshold == 0.3 and "above update_ratio_ceiling 0.3" in found.message


def test_non_finite_ratios_and_the_state_round_trip():
    detector = _detector()
    for step in range(1, 5):
        detector.update_state(step, _layers(a=1e-3, b=math.nan))
    restored = _detector()
    restored.load_state_dict(detector.state_dict())
    assert [a.kind for a in restored.update_state(5, _layers(a=1e-1))] == ["update_ratio"]


def test_the_monitor_acts_on_it_with_the_warn_policy(tmp_path, clock):
    import io
    monitor = Monitor(str(tmp_path), clock=clock, stream=io.StringIO(),
                      hardware_interval_s=None)
    layers = {"a": {"weight_norm": 1.0, "update_norm": 1e-3, "update_ratio": 1e-3,
                    "grad_norm": 0.1}}
    for step in range(1, 5):
        monitor.observe(step=step, loss=1.0, lr=1e-3, grad_norm=0.1)
        assert monitor.observe_state(step=step, weight_norm=1.0, update_norm=1e-3,
                                     layers=layers) == []
    monitor.observe(step=5, loss=1.0, lr=1e-3, grad_norm=0.1)
    [found] = monitor.observe_state(step=5, weight_norm=1.0, update_norm=0.2, layers={
        "a": {**layers["a"], "update_norm": 0.2, "update_ratio": 0.2}})
    assert found.actions == ["warn"] and monitor.stop_requested is None
    monitor.close()
    [record] = read_rank_log(str(tmp_path / "rank_0.jsonl")).anomalies
    assert record["anomaly"] == "update_ratio" and record["value"] == 0.2
    assert record["layer"] == "a"


def test_a_layer_that_never_moved_has_no_band_only_the_ceiling():
    detector = _detector()
    for step in range(1, 5):
        assert detector.update_state(step, _layers(frozen=0.0)) == []
    assert detector.update_state(5, _layers(frozen=1e-3)) == []
    [found] = detector.update_state(6, _layers(frozen=0.5))
    assert found.threshold == 0.3
