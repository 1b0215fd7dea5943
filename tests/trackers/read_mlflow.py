"""An MLflow run read back with ``MlflowClient``, as a TrackedRun."""
from __future__ import annotations

import os
import tempfile

from tracked import TrackedRun

STOPPED, COMPLETED = "KILLED", "FINISHED"     # what a stopped and a completed run end as


def read_mlflow(url: str, experiment: str) -> list[TrackedRun]:
    """Every run of ``experiment`` on the server at ``url``, oldest first."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=url)
    found = client.get_experiment_by_name(experiment)
    assert found is not None, f"no experiment {experiment!r} on {url}"
    runs = client.search_runs([found.experiment_id], order_by=["attributes.start_time ASC"])
    return [_tracked(client, run) for run in runs]


def _tracked(client, run) -> TrackedRun:
    run_id = run.info.run_id
    metrics = {name: sorted((m.step, m.value) for m in client.get_metric_history(run_id, name))
               for name in run.data.metrics}
    tags = run.data.tags
    files = {}
    with tempfile.TemporaryDirectory() as folder:
        for path in _artifacts(client, run_id, "mindwatch"):
            local = client.download_artifacts(run_id, path, folder)
            with open(local, "rb") as handle:
                files[os.path.relpath(path, "mindwatch")] = handle.read()
    events = [f"{key}: {value}" for key, value in sorted(tags.items())
              if key.startswith("mindwatch.anomaly.")]
    return TrackedRun(name=run.info.run_name, status=run.info.status,
                      verdict=tags.get("mindwatch.verdict"),
                      end_reason=tags.get("mindwatch.end_reason"), metrics=metrics,
                      config={k.removeprefix("config."): v for k, v in run.data.params.items()},
                      events=events, files=files)


def _artifacts(client, run_id: str, path: str) -> list[str]:
    found = []
    for item in client.list_artifacts(run_id, path):
        found += _artifacts(client, run_id, item.path) if item.is_dir else [item.path]
    return found
