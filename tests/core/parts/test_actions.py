"""Actions alone: what a finding does to the segment and the run log."""
from parts_kit import Kit

from mindwatch.anomaly import GRADIENT_NONFINITE, LOSS_SPIKE, OVERHEAT, Anomaly


def test_the_first_stopping_anomaly_becomes_the_stop_request(tmp_path, clock):
    saved = []
    kit = Kit(tmp_path, clock, save_checkpoint=lambda step, reason: saved.append(step) or
              f"{tmp_path}/ck{step}")
    kit.segment.last_step = 7
    warn = Anomaly(LOSS_SPIKE, 7, 9.0, 3.0, "spike", actions=["warn"])
    stop = Anomaly(GRADIENT_NONFINITE, 7, float("nan"), None, "nan",
                   actions=["checkpoint", "stop"])
    kit.actions.act([warn, stop])
    assert kit.segment.stop_requested is stop and kit.segment.anomalies == [warn, stop]
    assert saved == [7] and stop.checkpoint == f"{tmp_path}/ck7" and warn.checkpoint is None
    records = kit.sink.of_kind("anomaly")
    assert [(r["anomaly"], r["step"], r["actions"]) for r in records] == [
        ("loss_spike", 7, ["warn"]), ("gradient_nonfinite", 7, ["checkpoint", "stop"])]
    assert records[1]["checkpoint"] == f"{tmp_path}/ck7" and records[1]["report"]


def test_a_later_stop_does_not_replace_the_first(tmp_path, clock):
    kit = Kit(tmp_path, clock)
    first = Anomaly(GRADIENT_NONFINITE, 3, None, None, "a", actions=["stop"])
    kit.actions.act([first])
    kit.actions.act([Anomaly(GRADIENT_NONFINITE, 4, None, None, "b", actions=["stop"])])
    assert kit.segment.stop_requested is first and len(kit.segment.anomalies) == 2


def test_pending_findings_take_the_latest_step_and_are_acted_on_once(tmp_path, clock):
    kit = Kit(tmp_path, clock)
    kit.segment.last_step = 12
    kit.segment.pending.append(Anomaly(OVERHEAT, None, 95.0, 90.0, "hot", actions=["warn"]))
    [found] = kit.actions.act_on_pending()
    assert found.step == 12 and kit.segment.pending == []
    assert kit.actions.act_on_pending() == []
    assert [r["step"] for r in kit.sink.of_kind("anomaly")] == [12]


def test_a_checkpoint_that_fails_is_said_once_as_a_notice(tmp_path, clock):
    def full_disk(step, reason):
        raise OSError(28, "No space left on device")
    kit = Kit(tmp_path, clock, save_checkpoint=full_disk)
    for step in (1, 2):
        kit.segment.last_step = step
        kit.actions.act([Anomaly(GRADIENT_NONFINITE, step, None, None, "x",
                                 actions=["checkpoint", "stop"])])
    notices = [r["message"] for r in kit.sink.of_kind("notice")]
    assert len(notices) == 1 and "No space left on device" in notices[0]
    assert all(r["checkpoint"] is None for r in kit.sink.of_kind("anomaly"))
