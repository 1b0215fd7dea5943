"""Every anomaly's report is its own file: two of one step, and a run resumed over the same
steps, never share or replace one."""
import io
import json
from pathlib import Path

from mindwatch import Monitor
from mindwatch.runlog import read_rank_log


def test_two_anomalies_of_a_step_and_a_resumed_run_each_get_their_own_report(tmp_path, clock):
    def run(resume):
        monitor = Monitor(str(tmp_path), clock=clock, resume=resume, hardware_interval_s=None,
                          on_anomaly="stop", stream=io.StringIO())
        monitor.observe(step=1, loss=1.0, grad_norm=1.0)
        monitor.observe(step=2, loss=float("inf"), grad_norm=float("nan"))
        monitor.close()

    run(False)
    run(True)
    anomalies = read_rank_log(str(tmp_path / "rank_0.jsonl")).anomalies
    assert [(a["anomaly"], a["step"]) for a in anomalies] == [
        ("loss_nonfinite", 2), ("gradient_nonfinite", 2)] * 2
    names = [a["report"].rsplit("/", 1)[1] for a in anomalies]
    assert names == ["step2_rank0.json", "step2_rank0_gradient_nonfinite.json",
                     "step2_rank0_loss_nonfinite.json", "step2_rank0_gradient_nonfinite_2.json"]
    for anomaly in anomalies:
        report = json.loads(Path(anomaly["report"]).read_text())
        assert report["anomaly"] == anomaly["anomaly"]
        assert Path(anomaly["report"][:-len(".json")] + ".md").read_text().startswith(
            f"# Anomaly: {anomaly['anomaly']} at step 2")
