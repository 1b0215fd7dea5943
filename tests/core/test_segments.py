"""Run segments: a new segment (a second ``model.train``) starts clean after a stop, whether
this rank stopped on its own anomaly or because another rank did."""
import io
import json
import math

from mindwatch import FrameworkHooks, Monitor
from mindwatch.ranks.peers import stop_code
from mindwatch.runlog import read_rank_log


def _monitor(tmp_path, clock, **kwargs):
    return Monitor(str(tmp_path), clock=clock, stream=io.StringIO(), hardware_interval_s=None,
                   **kwargs)


def _segments(tmp_path, rank=0):
    """The run log cut into segments, each from its ``run`` record to its ``end`` record."""
    segments = []
    for record in read_rank_log(str(tmp_path / f"rank_{rank}.jsonl")).records:
        if record["kind"] == "run":
            segments.append([])
        segments[-1].append(record)
    return segments


def test_a_new_segment_after_an_own_stop_starts_clean(tmp_path, clock):
    monitor = _monitor(tmp_path, clock)
    monitor.start()
    clock.advance(1.0)
    monitor.observe(step=1, loss=2.0)
    clock.advance(1.0)
    found = monitor.observe(step=2, loss=math.nan)
    assert monitor.stop_requested is found[0] and monitor.stop_code() > 0
    monitor.close()

    clock.advance(5.0)                                   # the user fixes things, trains again
    monitor.start()
    assert monitor.stop_requested is None and monitor.anomalies == []
    assert monitor.stop_code() == 0 and monitor.last_step == 0
    clock.advance(0.5)
    assert monitor.observe(step=3, loss=1.5) == []
    monitor.close()

    first, second = _segments(tmp_path)
    assert first[-1]["reason"] == "stopped"
    assert first[-1]["stopped_by"] == {"anomaly": "loss_nonfinite", "step": 2, "rank": 0}
    end = second[-1]
    assert end["kind"] == "end" and end["reason"] == "completed" and end["stopped_by"] is None
    assert end["steps"] == 3 and end["elapsed_s"] == 0.5          # timers restarted
    assert [r["step_time_s"] for r in second if r["kind"] == "step"] == [0.5]


def test_a_new_segment_after_a_peer_stop_starts_clean(tmp_path, clock):
    monitor = _monitor(tmp_path, clock, rank=0, world_size=3)
    monitor.start()
    monitor.observe(step=1, loss=2.0)
    codes = [0, 0, stop_code("gradient_explode")]         # rank 2 stops the run after step 1
    [peer] = monitor.observe_peers(step=1, stop_codes=codes, data_times=[0.0] * 3)
    assert peer.kind == "peer_stop" and monitor.stop_requested is peer
    assert monitor.stop_code() == 0                      # not this rank's own wish
    monitor.close()

    monitor.start()
    monitor.observe(step=2, loss=1.9)
    # Rank 1 stops this segment: the end record must name rank 1, not the old rank 2.
    codes = [0, stop_code("loss_nonfinite"), 0]
    [peer] = monitor.observe_peers(step=2, stop_codes=codes, data_times=[0.0] * 3)
    assert peer.origin == (1, "loss_nonfinite")
    monitor.close()

    monitor.start()
    assert monitor.stop_requested is None and monitor.anomalies == []
    assert monitor.observe_peers(step=3, stop_codes=[0, 0, 0], data_times=[0.0] * 3) == []
    monitor.close()

    first, second, third = _segments(tmp_path)
    assert first[-1]["stopped_by"] == {"anomaly": "gradient_explode", "step": 1, "rank": 2}
    assert second[-1]["stopped_by"] == {"anomaly": "loss_nonfinite", "step": 2, "rank": 1}
    assert third[-1]["reason"] == "completed" and third[-1]["stopped_by"] is None


def test_framework_hooks_are_used_for_checkpoints_notes_and_resume_hints(tmp_path, clock):
    saved = []

    def save(step, reason):
        saved.append((step, reason))
        return str(tmp_path / "checkpoints" / f"at{step}.ckpt")

    notes = ["weights live on 8 devices"]
    hooks = FrameworkHooks(versions={"mindspore": "9.9"}, save_checkpoint=save,
                           resume_hint=lambda path: f"load({path!r})", notes=lambda: notes)
    monitor = _monitor(tmp_path, clock, framework=hooks)
    monitor.observe(step=1, loss=1.0)
    notes.append("added after construction")
    monitor.observe(step=2, loss=math.inf, skipped=True)      # the framework withheld it
    monitor.close()
    assert saved == [(2, "anomaly")]
    log = read_rank_log(str(tmp_path / "rank_0.jsonl"))
    assert log.records[0]["versions"]["mindspore"] == "9.9"
    anomaly = log.anomalies[0]
    assert anomaly["checkpoint"].endswith("at2.ckpt")
    report = (tmp_path / "anomalies" / "step2_rank0.md").read_text()
    assert "weights live on 8 devices" in report and "added after construction" in report
    assert "load(" in report and "at2.ckpt" in report
    assert "holds the last good weights: step 2's update was withheld" in report


def test_a_checkpoint_holding_the_bad_update_gets_no_resume_code(tmp_path, clock):
    # the update of step 2 was applied (not skipped), and nothing else saved a state
    hooks = FrameworkHooks(save_checkpoint=lambda step, reason: str(tmp_path / "c.ckpt"),
                           resume_hint=lambda path: f"load({path!r})")
    monitor = _monitor(tmp_path, clock, framework=hooks)
    monitor.observe(step=1, loss=1.0)
    monitor.observe(step=2, loss=math.inf)
    monitor.close()
    report = json.loads((tmp_path / "anomalies" / "step2_rank0.json").read_text())
    assert report["resume"] is None
    assert report["notes"] == [
        "the checkpoint's weights INCLUDE step 2's update (nothing withheld it: the step was "
        "observed with skipped=False after its update)",
        "no training state saved before step 2 exists"]
