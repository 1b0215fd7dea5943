"""report_to="mlflow" against a real MLflow tracking server (``mlflow server`` with a SQLite
store on 127.0.0.1, conftest.py's), read back with ``MlflowClient``: the step scalars equal
the run log's, the settings are parameters, a stopped run ends KILLED with the verdict, its
anomaly reports and the HTML report as artifacts; a server that is not there costs a line."""
import io
import json
import time

import pytest

mlflow = pytest.importorskip("mlflow", reason="report_to='mlflow' needs MLflow")

from against_log import stopped_run  # noqa: E402
from free_port import free_port  # noqa: E402

from mindwatch import Monitor  # noqa: E402
from mindwatch.report.summary import summarize_dir  # noqa: E402


def test_a_stopped_run_in_mlflow(mlflow_server, tmp_path):
    server = mlflow_server
    log_dir = tmp_path / "run"
    stopped_run(log_dir, {"mlflow": {"tracking_uri": server, "experiment": "t45"}})
    client = mlflow.tracking.MlflowClient(tracking_uri=server)
    experiment = client.get_experiment_by_name("t45")
    [run] = client.search_runs([experiment.experiment_id])
    steps = [json.loads(line) for line in (log_dir / "rank_0.jsonl").read_text().splitlines()
             if '"kind":"step"' in line]
    history = client.get_metric_history(run.info.run_id, "loss")
    logged = [(m.step, m.value) for m in sorted(history, key=lambda m: m.step)]
    assert logged[:4] == [(s["step"], s["loss"]) for s in steps[:4]]
    state = client.get_metric_history(run.info.run_id, "state_update_ratio/dense.weight")
    assert [(m.step, m.value) for m in state] == [(2, 0.01)]
    assert [m.value for m in client.get_metric_history(run.info.run_id,
                                                       "state/weight_norm")] == [3.0]
    assert run.info.status == "KILLED"
    assert run.data.tags["mindwatch.end_reason"] == "stopped"
    # the verdict is mindwatch summary's, word for word
    assert run.data.tags["mindwatch.verdict"] == summarize_dir(str(log_dir))["verdict"] \
        == "1 ANOMALY"
    assert any(k.startswith("mindwatch.anomaly.5.loss_nonfinite") for k in run.data.tags)
    assert run.data.params["config.grad_explode"] == "100.0"
    artifacts = [a.path for a in client.list_artifacts(run.info.run_id, "mindwatch")]
    assert {"mindwatch/anomalies.jsonl", "mindwatch/report.html"} <= set(artifacts)
    page = client.download_artifacts(run.info.run_id, "mindwatch/report.html", str(tmp_path))
    with open(page) as handle:
        assert "loss_nonfinite" in handle.read()


def test_a_dead_tracking_server_costs_a_line_and_never_the_run(tmp_path):
    """Nothing listens on the port: training goes on at its pace, the run log is complete,
    and the run log says once that MLflow did not take the records."""
    port = free_port()              # closed again: a refused connection
    log_dir = tmp_path / "run"
    monitor = Monitor(str(log_dir), stream=io.StringIO(), hardware_interval_s=None,
                      report_to={"mlflow": {"tracking_uri": f"http://127.0.0.1:{port}"}})
    started = time.monotonic()
    for step in range(1, 51):
        monitor.observe(step=step, loss=1.0 / step)
    stepped = time.monotonic() - started
    monitor.close()
    closed = time.monotonic() - started
    lines = [json.loads(line) for line in (log_dir / "rank_0.jsonl").read_text().splitlines()]
    assert [r["step"] for r in lines if r["kind"] == "step"] == list(range(1, 51))
    # the end, then what the tracker's drain said (as a dead alert webhook's is)
    ends = [r for r in lines if r["kind"] == "end"]
    assert len(ends) == 1 and ends[0]["reason"] == "completed"
    said = [r["message"] for r in lines if r["kind"] == "notice" and "MLflow" in r["message"]]
    assert len(said) == 1, said
    # the steps never waited for the tracker; the end waited at most its drain (10 s)
    assert stepped < 5 and closed < 30, (stepped, closed)
