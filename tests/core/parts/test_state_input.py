"""StateInput alone: the state record first, then the state detectors, then their actions."""
from parts_kit import Kit

from mindwatch.detectors import UpdateRatioDetector
from mindwatch.pipeline.state_input import StateInput


def _layers(ratio):
    return {"attn": {"weight_norm": 2.0, "update_norm": 2.0 * ratio, "update_ratio": ratio,
                     "grad_norm": 0.5, "m_norm": 0.1}}


def test_a_state_record_then_its_anomalies(tmp_path, clock):
    kit = Kit(tmp_path, clock)
    states = StateInput(detectors=[UpdateRatioDetector(factor=10.0, ceiling=0.3)],
                        writer=kit.writer, act=kit.actions.act)
    for step in (100, 200, 300):
        assert states.observe(step=step, weight_norm=2.0, update_norm=2e-3,
                              layers=_layers(1e-3)) == []
    [found] = states.observe(step=400, weight_norm=2.0, update_norm=0.1, layers=_layers(0.05),
                             activations={"attn": {"max_abs": 7.5, "rms": 1.25}})
    assert found.kind == "update_ratio" and found.actions == ["warn"]
    records = kit.sink.records
    assert [r["kind"] for r in records] == ["state"] * 4 + ["anomaly"]
    assert records[3]["layers"]["attn"]["update_ratio"] == 0.05
    assert records[3]["activations"] == {"attn": {"max_abs": 7.5, "rms": 1.25}}
    assert "activations" not in records[0]
    assert kit.segment.anomalies == [found]
