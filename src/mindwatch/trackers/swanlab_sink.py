"""SwanLab (``report_to="swanlab"``): one SwanLab run per mindwatch run segment, started, fed
and ended on the sink's own thread (SwanLab holds one run a process).

- mode: ``mode``, ``SWANLAB_MODE``, else "cloud" where SwanLab has credentials already
  (``SWANLAB_API_KEY``, ``swanlab login``) and "offline" otherwise: a library never asks for a
  login, and offline needs no other package ("local" needs ``swanboard``). An offline run is a
  ``backup.swanlab`` file that ``swanlab sync <run folder>`` uploads later;
- where: ``logdir``, ``SWANLAB_LOG_DIR``, else ``<log dir>/swanlog``, a ``run-<time>-<id>``
  folder a run; the project: ``project``, ``SWANLAB_PROJECT``, ``SWANLAB_PROJ_NAME``, else
  "mindwatch"; the experiment named after the run directory; settings and versions as config;
- metrics as ``base.py`` names them, at the run log's steps (host CPU and memory, NVIDIA GPUs
  and Ascend NPUs: SwanLab's own "system" charts); each anomaly a text of
  ``mindwatch/anomalies`` at its step;
- the end: config ``mindwatch/verdict``, ``mindwatch/end_reason``, ``mindwatch/outcome``, a
  text ``mindwatch/end``; the files as texts of ``mindwatch/files`` (SwanLab 0.6 holds no
  files) captioned ``report.html``, ``anomalies.jsonl``, ``anomalies/<report>``; the run ends
  SUCCESS when finished, else CRASHED (its only other end) with the reason as its error.
"""
from __future__ import annotations

import atexit
import contextlib
import math
import os
import sys
import threading
import time
import warnings
from collections.abc import Mapping
from typing import Any

from ..records import Anomaly, Run
from ..sinks.report_to import EXTRAS
from .base import FINISHED, HOST, RunEnd, TrackerSink

ANOMALIES, FILES, END = "mindwatch/anomalies", "mindwatch/files", "mindwatch/end"
PUSH_S = 5.0                 # how often SwanLab's own file is pushed to disk
TEXT_CHARS = 4_000_000       # the most of a file kept as one text entry
# what swanlab.init leaves in os.environ for the whole process: put back after it
_ENV = ("SWANLAB_MODE", "SWANLAB_LOG_DIR", "SWANLAB_PROJ_NAME", "SWANLAB_EXP_NAME",
        "SWANLAB_WORKSPACE")
_LOCK = threading.Lock()     # two sinks' starts: one takes SwanLab's run, the other is told


def _import_swanlab() -> Any:
    try:
        with warnings.catch_warnings():     # pynvml's deprecation, printed at every import
            warnings.simplefilter("ignore", FutureWarning)
            import swanlab
    except ImportError as exc:
        raise ImportError(f"report_to='swanlab' needs SwanLab: {EXTRAS['swanlab']}") from exc
    return swanlab


def _has_credentials() -> bool:
    from swanlab.package import get_key
    try:
        return bool(get_key())
    except Exception:               # KeyFileError, an unreadable ~/.swanlab/.netrc
        return False


class SwanLabSink(TrackerSink):
    HARDWARE_CHARTS = frozenset({HOST, "gpu", "npu"})   # SwanLab's monitor, on Linux

    def __init__(self, options: Mapping[str, Any], *, log_dir: str, rank: int = 0, **queue: Any):
        super().__init__(options, log_dir=log_dir, rank=rank, thread_name="mindwatch-swanlab",
                         **queue)
        self._swanlab = _import_swanlab()       # missing: said now, at construction
        self._project = (options.get("project") or os.environ.get("SWANLAB_PROJECT") or
                         os.environ.get("SWANLAB_PROJ_NAME") or "mindwatch")
        self._mode = options.get("mode") or os.environ.get("SWANLAB_MODE") or \
            ("cloud" if _has_credentials() else "offline")
        self._logdir = os.path.abspath(options.get("logdir") or os.environ.get("SWANLAB_LOG_DIR")
                                       or os.path.join(log_dir, "swanlog"))
        self.run: Any = None
        self._events: tuple[int, list[Any]] | None = None    # one step's anomalies, unwritten
        self._last_step, self._pushed = 0, 0.0

    @property
    def name(self) -> str:
        return f"SwanLab ({self._mode}, {self._logdir})"

    def start(self, record: Mapping[str, Any]) -> None:
        from swanlab.log import swanlog
        if self._mode == "cloud" and not _has_credentials():    # else it prompts for a login
            raise RuntimeError("mode 'cloud' needs `swanlab login` or SWANLAB_API_KEY")
        config = {**(record.get(Run.CONFIG) or {}),
                  "mindwatch/versions": dict(record.get(Run.VERSIONS) or {}),
                  "mindwatch/log_dir": os.path.abspath(self.log_dir),
                  "mindwatch/rank": self.rank, "mindwatch/world_size": record.get(Run.WORLD_SIZE)}
        env, hook = {name: os.environ.get(name) for name in _ENV}, sys.excepthook
        with _LOCK:
            if self._swanlab.get_run() is not None:
                raise RuntimeError("another SwanLab run is open in this process")
            swanlog.level = "critical"          # its banners are not the user's output
            os.environ["SWANLAB_MODE"] = self._mode     # not mode=: it warns when both say one
            try:
                self.run = self._swanlab.init(
                    project=self._project, experiment_name=self.run_name, config=config,
                    logdir=self._logdir, log_level="critical",
                    # no copy of the user's stdout and stderr (offline mode turns it on again:
                    # 0.6.4 merges its defaults over these settings; _unhook stops it)
                    settings=self._swanlab.Settings(log_proxy_type="none"))
            except BaseException:
                self._forget(hook)
                raise
            finally:
                for name, value in env.items():
                    if value is None:
                        os.environ.pop(name, None)
                    else:
                        os.environ[name] = value
            self._unhook(hook)
        self._events, self._last_step, self._pushed = None, 0, 0.0

    def _unhook(self, hook: Any) -> None:
        """Undo what SwanLab takes of the process: the console copy, ``sys.excepthook`` (its
        hook ends the run as crashed, and in cloud mode calls sys.exit) and its atexit finish
        (a run mindwatch did not end would read as a success): mindwatch ends the run."""
        from swanlab.log import swanlog
        if swanlog.proxied:
            swanlog.stop_proxy()
        operator = getattr(self._swanlab.get_run(), "_SwanLabRun__operator", None)
        for callback in getattr(operator, "callbacks", {}).values():
            if hasattr(callback, "_clean_handler"):
                atexit.unregister(callback._clean_handler)
        sys.excepthook = hook

    def _files_open(self) -> list[Any]:
        """SwanLab's own file (its backup), where it is open."""
        operator = getattr(self._swanlab.get_run(), "_SwanLabRun__operator", None)
        found = [getattr(getattr(getattr(callback, "backup", None), "f", None), "_fp", None)
                 for callback in getattr(operator, "callbacks", {}).values()]
        return [handle for handle in found if handle is not None and not handle.closed]

    def log(self, step: int, metrics: dict[str, float], wall_time: float) -> None:
        # SwanLab takes NaN and +inf (as "NaN" and "INF") but writes -inf as "INF" too: left
        # out. Its points carry its own clock: wall_time has no place there.
        values = {k: v for k, v in metrics.items() if not (math.isinf(v) and v < 0)}
        if self._events is not None and self._events[0] != step:
            self._write_events()
        self._last_step = max(self._last_step, step)
        if values:
            self.run.log(values, step=step)
        if time.monotonic() - self._pushed >= PUSH_S:
            # SwanLab writes its file on a thread of its own and drops what fails there (a
            # full disk is silent until its finish): pushed from here, a failure is ours to
            # say, and a killed process loses at most PUSH_S of the file
            self._pushed = time.monotonic()
            for handle in self._files_open():
                handle.flush()

    def event(self, record: Mapping[str, Any]) -> None:
        # SwanLab keeps one entry a step and a key, and the anomalies of a step come one
        # after the other: they are written together, with the next step (or at the end)
        step = int(record.get(Anomaly.STEP) or 0)
        kind, actions = record.get(Anomaly.ANOMALY), ",".join(record.get(Anomaly.ACTIONS) or [])
        text = self._swanlab.Text(f"step {step}: {kind} [{actions or 'none'}] "
                                  f"{record.get(Anomaly.MESSAGE)}", caption=str(kind))
        if self._events is not None and self._events[0] != step:
            self._write_events()
        self._events = self._events or (step, [])
        self._events[1].append(text)

    def _write_events(self) -> None:
        if self._events is None:
            return
        (step, texts), self._events = self._events, None
        self.run.log({ANOMALIES: texts[:100]}, step=step)     # SwanLab cuts a list at 108

    def end(self, run_end: RunEnd) -> None:
        swanlab, reason, hook = self._swanlab, str(run_end.reason), sys.excepthook
        try:
            self._write_events()
            self.run.config.update({"mindwatch/verdict": run_end.verdict,
                                    "mindwatch/end_reason": reason,
                                    "mindwatch/outcome": run_end.outcome})
            said = f"{run_end.verdict} (end: {reason}, {run_end.outcome})" + \
                (f"; no report: {run_end.problem}" if run_end.problem else "")
            self.run.log({END: swanlab.Text(said, caption="verdict")}, step=self._last_step)
            for index, (caption, text) in enumerate(_files(run_end)):
                self.run.log({FILES: swanlab.Text(text, caption=caption)}, step=index)
        finally:                        # whatever failed above, the run is ended
            try:
                if run_end.outcome == FINISHED:
                    swanlab.finish(swanlab.State.SUCCESS)
                else:   # 0.6.4 keeps the error (its offline file's mark of a crash) only
                    # when it copies stderr: its setting says it does, for this finish
                    settings = swanlab.swanlab_settings
                    settings.set_settings(settings.get_settings().model_copy(
                        update={"log_proxy_type": "stderr"}))
                    swanlab.finish(swanlab.State.CRASHED, error=f"{reason}: {run_end.verdict}")
            except BaseException:
                self._forget(hook)
                raise
            finally:
                sys.excepthook, self.run = hook, None     # its finish sets sys.__excepthook__

    def _forget(self, hook: Any) -> None:
        """After SwanLab failed half-way: its hooks undone, its file closed and its run let
        go, so that the next segment (or the user) can start one."""
        from swanlab import swanlab_settings
        from swanlab.data.run import main
        self._unhook(hook)
        for handle in self._files_open():
            with contextlib.suppress(OSError):  # what it could not write (a full disk): lost
                handle.close()
        main.run = None
        main.config.clean()
        swanlab_settings.reset_settings()
        main.swanlog.reset()            # its console copy and its level


def _files(run_end: RunEnd) -> list[tuple[str, str]]:
    """(caption, text) of each file: the anomalies, the page, the anomaly reports."""
    texts = [("anomalies.jsonl", "\n".join(run_end.anomalies) + "\n")] if run_end.anomalies \
        else []
    folder = run_end.reports_dir
    paths = ([("report.html", run_end.report)] if run_end.report else []) + \
        ([(f"anomalies/{name}", os.path.join(folder, name)) for name in sorted(os.listdir(folder))
          if os.path.isfile(os.path.join(folder, name))] if folder else [])
    for caption, path in paths:
        with open(path, encoding="utf-8", errors="replace") as handle:
            texts.append((caption, handle.read(TEXT_CHARS)))
    return texts
