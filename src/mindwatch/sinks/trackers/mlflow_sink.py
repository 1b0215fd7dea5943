"""MLflow (``report_to="mlflow"``): one MLflow run per mindwatch run segment, fed from the
sink's own thread through ``MlflowClient`` (the tracking server named by ``tracking_uri`` or
``MLFLOW_TRACKING_URI``; a local ``./mlruns`` store otherwise):

- the ``run`` record: the experiment (``experiment``, ``MLFLOW_EXPERIMENT_NAME``, else
  "mindwatch"), a run named after the run directory, the settings as parameters
  (``config.<name>``) and the versions as tags;
- every ``step`` record: its scalars under the run log's names, the run log's step as
  MLflow's step, batched (one request a second or every ``BATCH`` values); every ``state``
  record: ``state/weight_norm``, ``state/update_norm`` and ``layers/<layer>/<field>``;
- every ``anomaly``: a tag ``mindwatch.anomaly.<step>.<kind>`` with its message and actions,
  and a line of the ``mindwatch/anomalies.jsonl`` artifact;
- the ``end``: the run's status (``completed`` FINISHED; a stop or a signal KILLED; an error
  or an abort FAILED: a stopped run does not end as a finished one), tags
  ``mindwatch.end_reason`` and ``mindwatch.verdict``, and the anomaly reports as artifacts.
"""
from __future__ import annotations

import json
import math
import os
import re
import time
from collections.abc import Mapping
from typing import Any

from ... import records
from ...records import Anomaly, Common, End, Run, State, Step
from ..queued import QueuedSink
from .report_to import EXTRAS

SCALARS = (Step.LOSS, Step.LOSS_SMOOTH, Step.LR, Step.GRAD_NORM, Step.STEP_TIME_S,
           Step.SAMPLES_PER_S, Step.TOKENS_PER_S, Step.MFU, Step.ETA_S, Step.DATA_TIME_S,
           Step.LOSS_SCALE, Step.LOCAL_GRAD_NORM)
QUEUE_SIZE = 10_000      # records waiting (~an hour of steps at 3 steps/s)
DRAIN_S = 10.0           # the longest a closing run waits for MLflow
BATCH = 900              # values a request (MLflow takes up to 1000 metrics a batch)
FLUSH_S = 1.0
STATUS = {records.COMPLETED: "FINISHED", records.STOPPED: "KILLED", records.SIGNAL: "KILLED",
          records.ERROR: "FAILED", records.ABORTED: "FAILED"}
PARAM_CHARS = 500        # MLflow's shortest limit on a parameter's value across versions
# what MLflow allows in a metric's name: letters, digits, "_", "-", ".", " ", "/"
_NAME = re.compile(r"[^A-Za-z0-9_\-. /]")


def _import_mlflow() -> Any:
    try:
        import mlflow
        from mlflow.tracking import MlflowClient
    except ImportError as exc:
        raise ImportError(f"report_to='mlflow' needs MLflow: {EXTRAS['mlflow']}") from exc
    return mlflow, MlflowClient


class MlflowSink(QueuedSink):
    def __init__(self, options: Mapping[str, Any], *, log_dir: str,
                 queue_size: int = QUEUE_SIZE, drain_s: float = DRAIN_S):
        super().__init__(queue_size=queue_size, drain_s=drain_s, thread_name="mindwatch-mlflow")
        self._mlflow, client = _import_mlflow()     # missing: said now, at construction
        self._uri = options.get("tracking_uri") or os.environ.get("MLFLOW_TRACKING_URI")
        self._client = client(tracking_uri=self._uri) if self._uri else client()
        self._experiment = (options.get("experiment") or
                            os.environ.get("MLFLOW_EXPERIMENT_NAME") or "mindwatch")
        self._run_name = options.get("run_name") or os.path.basename(
            os.path.abspath(log_dir))
        self.log_dir = log_dir
        self.run_id: str | None = None
        self._metrics: list[Any] = []
        self._flushed = time.monotonic()
        self._anomalies: list[str] = []
        self._end: Mapping[str, Any] | None = None

    @property
    def name(self) -> str:
        return f"MLflow ({self._uri or 'local ./mlruns'})"

    def deliver(self, record: Mapping[str, Any]) -> None:
        kind = record.get(Common.KIND)
        if kind == records.RUN:
            self._start(record)
        elif self.run_id is None:
            return
        elif kind == records.STEP:
            self._step(record)
        elif kind == records.STATE:
            self._state(record)
        elif kind == records.ANOMALY:
            self._anomaly(record)
        elif kind == records.END:
            self._end = record
            self._finish_run()

    def finish(self) -> None:
        if self.run_id is not None and self._end is None:
            self._finish_run()

    def _start(self, record: Mapping[str, Any]) -> None:
        from mlflow.entities import Param, RunTag

        if self.run_id is not None and self._end is None:
            self._finish_run()
        experiment = self._client.get_experiment_by_name(self._experiment)
        experiment_id = experiment.experiment_id if experiment is not None else \
            self._client.create_experiment(self._experiment)
        versions = record.get(Run.VERSIONS) or {}
        tags = {"mindwatch.log_dir": os.path.abspath(self.log_dir),
                **{f"mindwatch.versions.{k}": str(v) for k, v in versions.items()}}
        run = self._client.create_run(experiment_id, run_name=self._run_name, tags=tags)
        self.run_id, self._end, self._anomalies = run.info.run_id, None, []
        config = record.get(Run.CONFIG) or {}
        params = [Param(f"config.{key}", _text(value)[:PARAM_CHARS])
                  for key, value in sorted(config.items())]
        for start in range(0, len(params), 100):
            self._client.log_batch(self.run_id, params=params[start:start + 100])
        self._client.log_batch(self.run_id, tags=[RunTag("mindwatch.world_size",
                                                         str(record.get(Run.WORLD_SIZE)))])

    def _step(self, record: Mapping[str, Any]) -> None:
        from mlflow.entities import Metric

        step = int(record[Step.STEP])
        at = int(float(record.get(Common.TIME) or time.time()) * 1000)
        for name in SCALARS:
            value = record.get(name)
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                self._metrics.append(Metric(name, float(value), at, step))
        self._metrics.append(Metric("skipped", float(bool(record.get(Step.SKIPPED))), at, step))
        if len(self._metrics) >= BATCH or time.monotonic() - self._flushed >= FLUSH_S:
            self._flush()

    def _state(self, record: Mapping[str, Any]) -> None:
        """The model's state at its own interval: ``state/weight_norm``, ``state/update_norm``
        and each layer's norms as ``layers/<layer>/<field>`` (MLflow groups charts by the
        prefix before the last "/")."""
        from mlflow.entities import Metric

        step = int(record[State.STEP])
        at = int(float(record.get(Common.TIME) or time.time()) * 1000)
        values = {f"state/{name}": record.get(name)
                  for name in (State.WEIGHT_NORM, State.UPDATE_NORM)}
        for layer, fields in (record.get(State.LAYERS) or {}).items():
            for name, value in (fields or {}).items():
                values[f"layers/{_NAME.sub('_', str(layer))}/{name}"] = value
        self._metrics += [Metric(name, float(value), at, step) for name, value in values.items()
                          if isinstance(value, (int, float)) and not isinstance(value, bool)]
        if len(self._metrics) >= BATCH:
            self._flush()

    def _flush(self) -> None:
        metrics, self._metrics = self._metrics, []
        self._flushed = time.monotonic()
        for start in range(0, len(metrics), BATCH):
            self._client.log_batch(self.run_id, metrics=metrics[start:start + BATCH])

    def _anomaly(self, record: Mapping[str, Any]) -> None:
        self._flush()           # the steps before it are there when it is
        kind, step = record.get(Anomaly.ANOMALY), record.get(Anomaly.STEP)
        actions = ",".join(record.get(Anomaly.ACTIONS) or [])
        self._client.set_tag(self.run_id, f"mindwatch.anomaly.{step}.{kind}",
                             f"[{actions}] {record.get(Anomaly.MESSAGE)}"[:5000])
        self._anomalies.append(json.dumps(_strict(record)))

    def _finish_run(self) -> None:
        self._flush()
        end = self._end or {}
        reason = end.get(End.REASON)
        anomalies = len(self._anomalies)
        verdict = (f"{anomalies} {'ANOMALY' if anomalies == 1 else 'ANOMALIES'}, "
                   if anomalies else "") + (str(reason).upper() if reason else
                                            "NO END RECORD")
        self._client.set_tag(self.run_id, "mindwatch.end_reason", str(reason))
        self._client.set_tag(self.run_id, "mindwatch.verdict", verdict)
        if self._anomalies:
            self._client.log_text(self.run_id, "\n".join(self._anomalies) + "\n",
                                  "mindwatch/anomalies.jsonl")
        reports = os.path.join(self.log_dir, "anomalies")
        if os.path.isdir(reports) and os.listdir(reports):
            self._client.log_artifacts(self.run_id, reports, "mindwatch/anomalies")
        self._client.set_terminated(self.run_id, STATUS.get(str(reason), "FAILED"))
        self._end = end or {End.REASON: None}


def _text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, default=str)


def _strict(record: Mapping[str, Any]) -> dict[str, Any]:
    return {k: (str(v) if isinstance(v, float) and not math.isfinite(v) else v)
            for k, v in record.items()}
