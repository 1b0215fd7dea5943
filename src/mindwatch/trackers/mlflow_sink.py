"""MLflow (``report_to="mlflow"``): one MLflow run per mindwatch run segment, fed through
``MlflowClient`` (the tracking server named by ``tracking_uri`` or ``MLFLOW_TRACKING_URI``; a
local ``./mlruns`` store otherwise) from the sink's own thread:

- the ``run`` record: the experiment (``experiment``, ``MLFLOW_EXPERIMENT_NAME``, else
  "mindwatch"), a run named after the run directory, the settings as parameters
  (``config.<name>``) and the versions as tags;
- metrics as ``base.py`` names them, batched (one request a second or every ``BATCH``
  values; to a tracking server, posted as JSON built here: MLflow's client converts each
  value through protobuf's pure-Python JSON, ~14 us a value, a tenth of a 10 ms step's
  budget at 9 values a step, on the host's CPU); every hardware field (MLflow's own system
  metrics come only with its fluent ``start_run``, which a library must not take from its
  user);
- every anomaly: a tag ``mindwatch.anomaly.<step>.<kind>`` with its actions and message;
- the end: the run's status (FINISHED, KILLED for a stop or a signal, FAILED), the tags
  ``mindwatch.end_reason`` and ``mindwatch.verdict``, and as artifacts under ``mindwatch/``:
  ``anomalies.jsonl``, the anomaly reports and ``report.html``.
"""
from __future__ import annotations

import json
import math
import os
import re
import time
from collections.abc import Mapping
from typing import Any

from ..records import Anomaly, Run
from ..sinks.report_to import EXTRAS
from .base import FAILED, FINISHED, KILLED, RunEnd, TrackerSink

BATCH = 900              # values a request (MLflow takes up to 1000 metrics a batch)
FLUSH_S = 1.0
STATUS = {FINISHED: "FINISHED", KILLED: "KILLED", FAILED: "FAILED"}
PARAM_CHARS = 500        # MLflow's shortest limit on a parameter's value across versions
# what MLflow allows in a metric's name: letters, digits, "_", "-", ".", " ", "/"
_NAME = re.compile(r"[^A-Za-z0-9_\-. /]")


def _import_mlflow() -> Any:
    try:
        from mlflow.tracking import MlflowClient
    except ImportError as exc:
        raise ImportError(f"report_to='mlflow' needs MLflow: {EXTRAS['mlflow']}") from exc
    return MlflowClient


class MlflowSink(TrackerSink):
    def __init__(self, options: Mapping[str, Any], *, log_dir: str, rank: int = 0, **queue: Any):
        super().__init__(options, log_dir=log_dir, rank=rank, thread_name="mindwatch-mlflow",
                         **queue)
        client = _import_mlflow()       # missing: said now, at construction
        self._uri = options.get("tracking_uri") or os.environ.get("MLFLOW_TRACKING_URI")
        self._client = client(tracking_uri=self._uri) if self._uri else client()
        self._experiment = (options.get("experiment") or
                            os.environ.get("MLFLOW_EXPERIMENT_NAME") or "mindwatch")
        self.run_id: str | None = None
        self._post = _poster(self._client)
        self._metrics: list[tuple[str, float, int, int]] = []     # name, value, ms, step
        self._flushed = time.monotonic()

    @property
    def name(self) -> str:
        return f"MLflow ({self._uri or 'local ./mlruns'})"

    def start(self, record: Mapping[str, Any]) -> None:
        from mlflow.entities import Param, RunTag

        experiment = self._client.get_experiment_by_name(self._experiment)
        experiment_id = experiment.experiment_id if experiment is not None else \
            self._client.create_experiment(self._experiment)
        versions = record.get(Run.VERSIONS) or {}
        tags = {"mindwatch.log_dir": os.path.abspath(self.log_dir),
                "mindwatch.rank": str(self.rank),
                **{f"mindwatch.versions.{k}": str(v) for k, v in versions.items()}}
        run = self._client.create_run(experiment_id, run_name=self.run_name, tags=tags)
        self.run_id = run.info.run_id
        config = record.get(Run.CONFIG) or {}
        params = [Param(f"config.{key}", _text(value)[:PARAM_CHARS])
                  for key, value in sorted(config.items())]
        for start in range(0, len(params), 100):
            self._client.log_batch(self.run_id, params=params[start:start + 100])
        self._client.log_batch(self.run_id, tags=[RunTag("mindwatch.world_size",
                                                         str(record.get(Run.WORLD_SIZE)))])

    def log(self, step: int, metrics: dict[str, float], wall_time: float) -> None:
        # A non-finite value is left out: MLflow's UI drops the whole chart of a metric whose
        # latest value is NaN (the loss chart of a run a NaN stopped would vanish); the step's
        # anomaly tag and anomalies/<kind> mark it instead.
        at = int(wall_time * 1000)
        self._metrics += [(_name(name), value, at, step) for name, value in metrics.items()
                          if math.isfinite(value)]
        if len(self._metrics) >= BATCH or time.monotonic() - self._flushed >= FLUSH_S:
            self.flush()

    def flush(self) -> None:
        metrics, self._metrics = self._metrics, []
        self._flushed = time.monotonic()
        for start in range(0, len(metrics), BATCH):
            batch = metrics[start:start + BATCH]
            if self._post is not None:
                self._post({"run_id": self.run_id, "metrics": [
                    {"key": name, "value": value, "timestamp": at, "step": step}
                    for name, value, at, step in batch]})
            else:
                from mlflow.entities import Metric
                self._client.log_batch(self.run_id, metrics=[Metric(*m) for m in batch])

    def event(self, record: Mapping[str, Any]) -> None:
        kind, step = record.get(Anomaly.ANOMALY), record.get(Anomaly.STEP)
        actions = ",".join(record.get(Anomaly.ACTIONS) or [])
        self._client.set_tag(self.run_id, f"mindwatch.anomaly.{step}.{kind}",
                             f"[{actions}] {record.get(Anomaly.MESSAGE)}"[:5000])

    def end(self, run_end: RunEnd) -> None:
        self._client.set_tag(self.run_id, "mindwatch.end_reason", str(run_end.reason))
        self._client.set_tag(self.run_id, "mindwatch.verdict", run_end.verdict)
        if run_end.anomalies:
            self._client.log_text(self.run_id, "\n".join(run_end.anomalies) + "\n",
                                  "mindwatch/anomalies.jsonl")
        if run_end.reports_dir:
            self._client.log_artifacts(self.run_id, run_end.reports_dir, "mindwatch/anomalies")
        if run_end.report:
            self._client.log_artifact(self.run_id, run_end.report, "mindwatch")
        self._client.set_terminated(self.run_id, STATUS[run_end.outcome])


def _poster(client: Any) -> Any:
    """A function that posts a ``runs/log-batch`` body to the tracking server through MLflow's
    own HTTP layer (its credentials, retries and errors); None for a store that is not a
    server (a local directory or database: the client's ``log_batch`` then). The store is
    reached through the client's private attributes: where they are not, the client's way."""
    try:
        from mlflow.store.tracking.rest_store import RestStore
        from mlflow.utils.rest_utils import http_request, verify_rest_response

        store = client._tracking_client.store
    except (ImportError, AttributeError):
        return None
    if not isinstance(store, RestStore):
        return None
    endpoint = "/api/2.0/mlflow/runs/log-batch"

    def post(body: dict[str, Any]) -> None:
        verify_rest_response(http_request(store.get_host_creds(), endpoint, "POST", json=body),
                             endpoint)
    return post


_names: dict[str, str] = {}


def _name(name: str) -> str:
    """``name`` as MLflow accepts it (cached: the same few names every step)."""
    found = _names.get(name)
    if found is None:
        found = _names[name] = _NAME.sub("_", name)
    return found


def _text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, default=str)
