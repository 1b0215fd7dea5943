"""Weights & Biases (``report_to="wandb"``): one W&B run per mindwatch run segment, started,
fed and finished on the sink's own thread.

- where: ``project`` (else ``WANDB_PROJECT``, else "mindwatch"), ``entity``, ``mode`` (else
  ``WANDB_MODE``, else W&B's own choice), ``dir`` (else ``WANDB_DIR``, else W&B's ``./wandb``);
  an offline run is ``<dir>/wandb/offline-run-*/run-*.wandb``, uploaded by ``wandb sync``;
- the ``run`` record: a run named after the run directory, the settings as W&B config and the
  versions, directory, rank and world size under ``mindwatch/``;
- metrics as ``base.py`` names them against ``mindwatch/step``, the run log's step; the host's
  CPU and memory and NVIDIA GPUs are left to W&B's own system monitor (Ascend NPUs are not);
- every anomaly: a W&B alert (offline, kept in the run and sent by ``wandb sync``);
- the end: ``mindwatch/verdict``, ``end_reason``, ``outcome`` and a table of the anomalies in
  the summary; ``report.html``, ``anomalies.jsonl`` and the anomaly reports as run files under
  ``mindwatch/``; the exit code (W&B: 0 is "finished", anything else "failed").
"""
from __future__ import annotations

import json
import os
import shutil
import sys
from collections.abc import Mapping
from typing import Any

from ..records import Anomaly, Run
from ..sinks.report_to import EXTRAS
from .base import FAILED, FINISHED, HOST, KILLED, RunEnd, TrackerSink

STEP = "mindwatch/step"
# 143 (128 + SIGTERM): what a job ended from outside shows; 1: what W&B records for an error
EXIT_CODES = {FINISHED: 0, KILLED: 143, FAILED: 1}
MIN_FREE = 1 << 20           # bytes: less left under W&B's directory reads as a full disk
ALERT_CHARS = 2_000
_FULL, _STOP = "wandb-disk-full", "wandb-stop"      # OnceMessages keys


def _import_wandb() -> Any:
    try:
        import wandb
    except ImportError as exc:
        raise ImportError(f"report_to='wandb' needs W&B: {EXTRAS['wandb']}") from exc
    return wandb


class WandbSink(TrackerSink):
    HARDWARE_CHARTS = frozenset({HOST, "gpu"})      # wandb-symon: host, NVML/DCGM; no NPU

    def __init__(self, options: Mapping[str, Any], *, log_dir: str, rank: int = 0, **queue: Any):
        super().__init__(options, log_dir=log_dir, rank=rank, thread_name="mindwatch-wandb",
                         **queue)
        self._wandb = _import_wandb()       # missing: said now, at construction
        self._project = options.get("project") or os.environ.get("WANDB_PROJECT") or "mindwatch"
        self._entity = options.get("entity") or None
        self._mode = options.get("mode") or os.environ.get("WANDB_MODE") or None
        folder = options.get("dir") or os.environ.get("WANDB_DIR")
        self._dir = os.path.abspath(folder) if folder else None
        self.run: Any = None
        self._files, self._full_said = "", False     # the run's folder; said it is full

    @property
    def name(self) -> str:
        return f"W&B ({self._mode or 'default mode'}, {self._dir or './wandb'})"

    def start(self, record: Mapping[str, Any]) -> None:
        wandb = self._wandb
        config = dict(record.get(Run.CONFIG) or {})
        config.update({"mindwatch/versions": dict(record.get(Run.VERSIONS) or {}),
                       "mindwatch/log_dir": os.path.abspath(self.log_dir),
                       "mindwatch/rank": self.rank,
                       "mindwatch/world_size": record.get(Run.WORLD_SIZE)})
        if self._dir:   # W&B, unable to write there, would fall back to the temp folder
            os.makedirs(self._dir, exist_ok=True)
            if not os.access(self._dir, os.W_OK):
                raise PermissionError(f"{self._dir} is not writable")
        settings = wandb.Settings(
            console="off",      # no copy of the user's stdout/stderr, no SIGWINCH handler
            quiet=True,         # its header only: the run's folder, how to view it
            # W&B stops a run (from its page, or on a fatal upload error) by sending SIGINT
            # to the main thread: a KeyboardInterrupt in the middle of the user's step.
            # A tracker never ends training: it is said instead.
            stop_fn=self._stop_asked)
        hooks = sys.exit, sys.excepthook
        try:
            # reinit "create_new": a run of its own, beside any the user has; wandb.run and
            # wandb.log stay the user's, and a second segment gets a new run.
            self.run = wandb.init(project=self._project, entity=self._entity, dir=self._dir,
                                  mode=self._mode, name=self.run_name, config=config,
                                  reinit="create_new", settings=settings)
        finally:
            # W&B's first init starts its service and takes sys.exit and sys.excepthook to
            # learn the process's exit code; this run's is given at finish: put them back.
            sys.exit, sys.excepthook = hooks
        # W&B refuses a step below one it has (``step=``): a rewound or resumed run would
        # lose its steps. Its own step (_step) is left to count rows; every chart is drawn
        # against the run log's step, which may go back.
        self.run.define_metric(STEP)
        self.run.define_metric("*", step_metric=STEP)
        self._files, self._full_said = self.run.dir, False

    def _stop_asked(self) -> None:
        self._messages.report(_STOP, f"{self.name} asked to stop the run; mindwatch does not "
                                     "stop training for a tracker (on_anomaly does)")

    def log(self, step: int, metrics: dict[str, float], wall_time: float) -> None:
        # W&B keeps NaN and infinities; _timestamp: the run log's wall time, not now
        self.run.log({**metrics, STEP: step, "_timestamp": wall_time})
        self._check_space()

    def _check_space(self) -> None:
        """wandb-core writes the run in its own process and drops what a full disk refuses
        without a word to Python: the space left is looked at here (a statvfs, microseconds)."""
        if self._full_said:
            return
        try:
            found = os.statvfs(self._files)
        except OSError:
            return
        left = found.f_bavail * found.f_frsize
        if left < MIN_FREE:
            self._full_said = True
            self._messages.report(_FULL, f"{self.name}: {left // 1024} KiB left on the disk "
                                         f"of {self._files}; what W&B cannot write there is "
                                         "lost (W&B does not say so); training goes on")

    def event(self, record: Mapping[str, Any]) -> None:
        actions = record.get(Anomaly.ACTIONS) or []
        self.run.alert(title=f"mindwatch: {record.get(Anomaly.ANOMALY)} at step "
                             f"{record.get(Anomaly.STEP)} ({self.run_name})",
                       text=f"[{','.join(actions) or 'none'}] "
                            f"{record.get(Anomaly.MESSAGE)}"[:ALERT_CHARS],
                       level="ERROR" if "stop" in actions else "WARN")

    def end(self, run_end: RunEnd) -> None:
        run, self.run = self.run, None
        try:
            run.summary.update({"mindwatch/verdict": run_end.verdict,
                                "mindwatch/end_reason": str(run_end.reason),
                                "mindwatch/outcome": run_end.outcome})
            if run_end.problem:
                run.summary["mindwatch/report_problem"] = run_end.problem
            if run_end.anomalies:
                rows = [json.loads(line) for line in run_end.anomalies]
                run.summary["mindwatch/anomalies"] = self._wandb.Table(
                    columns=["step", "anomaly", "actions", "message"],
                    data=[[r.get(Anomaly.STEP), r.get(Anomaly.ANOMALY),
                           ",".join(r.get(Anomaly.ACTIONS) or []), r.get(Anomaly.MESSAGE)]
                          for r in rows])
            try:
                self._save_files(run, run_end)
            except OSError:
                self._check_space()
                if not self._full_said:     # a full disk was said once already: not again
                    raise
        finally:
            run.finish(exit_code=EXIT_CODES[run_end.outcome])

    def _save_files(self, run: Any, run_end: RunEnd) -> None:
        """Copied into the run's own folder first: the report lives in a temporary directory
        gone at exit, and an offline run's files are uploaded later, by ``wandb sync``."""
        folder = os.path.join(run.dir, "mindwatch")
        os.makedirs(folder, exist_ok=True)
        saved = []
        if run_end.anomalies:
            saved.append(os.path.join(folder, "anomalies.jsonl"))
            with open(saved[-1], "w", encoding="utf-8") as out:
                out.write("\n".join(run_end.anomalies) + "\n")
        if run_end.reports_dir:
            for name in sorted(os.listdir(run_end.reports_dir)):
                if os.path.isfile(os.path.join(run_end.reports_dir, name)):
                    os.makedirs(os.path.join(folder, "anomalies"), exist_ok=True)
                    saved.append(shutil.copy(os.path.join(run_end.reports_dir, name),
                                             os.path.join(folder, "anomalies", name)))
        if run_end.report:
            saved.append(shutil.copy(run_end.report, os.path.join(folder, "report.html")))
        for path in saved:       # "now": sent as they are, they do not change after
            run.save(path, base_path=run.dir, policy="now", glob=False)
