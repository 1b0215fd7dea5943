"""The attention_logit rule alone, and through a Monitor's state records."""
import io
import math

from mindwatch import Monitor
from mindwatch.detectors import AttentionLogitDetector
from mindwatch.runlog import read_rank_log

LAYERS = {"a": {"weight_norm": 1.0, "update_norm": 1e-3, "update_ratio": 1e-3,
                "grad_norm": 0.1}}


def _cells(**logits):
    return {cell: {"max_logit": logit} for cell, logit in logits.items()}


def test_the_worst_cell_above_the_limit_once_per_episode():
    detector = AttentionLogitDetector(limit=100.0)
    assert detector.update_state(1, LAYERS, _cells(b0=99.9, b1=-3.0)) == []
    assert detector.update_state(2, LAYERS, None) == []             # nothing watched
    [found] = detector.update_state(3, LAYERS, _cells(b0=150.0, b1=420.0))
    assert (found.kind, found.step, found.value, found.threshold) == (
        "attention_logit", 3, 420.0, 100.0)
    assert found.message.startswith("attention b1: largest logit 420 at step 3 is above "
                                    "max_attention_logit 100")
    assert detector.update_state(4, LAYERS, _cells(b0=160.0, b1=500.0)) == []
    # b0 was past already at step 3 (not the worst): its episode began there too
    assert detector.update_state(5, LAYERS, _cells(b0=170.0, b1=10.0)) == []
    [again] = detector.update_state(6, LAYERS, _cells(b0=10.0, b1=101.0))   # b1 re-armed
    assert again.value == 101.0


def test_infinite_counts_nan_does_not_and_outputs_without_logits_are_ignored():
    detector = AttentionLogitDetector(limit=100.0)
    assert detector.update_state(1, LAYERS, _cells(a=math.nan)) == []
    assert detector.update_state(2, LAYERS, {"mlp": {"max_abs": 1e9, "rms": 1e8}}) == []
    [found] = detector.update_state(3, LAYERS, _cells(a=math.inf))
    assert found.value == math.inf
    restored = AttentionLogitDetector(limit=100.0)
    restored.load_state_dict(detector.state_dict())
    assert restored.update_state(4, LAYERS, _cells(a=math.inf)) == []     # same episode


def test_the_monitor_warns_and_trains_on(tmp_path, clock):
    monitor = Monitor(str(tmp_path), clock=clock, stream=io.StringIO(),
                      hardware_interval_s=None, max_attention_logit=50.0)
    monitor.observe(step=1, loss=1.0, lr=1e-3, grad_norm=0.1)
    [found] = monitor.observe_state(step=1, weight_norm=1.0, update_norm=1e-3, layers=LAYERS,
                                    activations=_cells(**{"blocks.0.attn.scores": 64.0}))
    assert found.actions == ["warn"] and monitor.stop_requested is None
    monitor.close()
    log = read_rank_log(str(tmp_path / "rank_0.jsonl"))
    [record] = log.anomalies
    assert (record["anomaly"], record["value"], record["threshold"]) == (
        "attention_logit", 64.0, 50.0)
    assert record["layer"] == "blocks.0.attn.scores"
    [state] = log.of_kind("state")
    assert state["activations"] == {"blocks.0.attn.scores": {"max_logit": 64.0}}
