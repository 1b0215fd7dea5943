"""What a tracker receives when the run ends, read back from the run directory as the views
read it: ``mindwatch summary``'s verdict (the job's, from ``job.jsonl``, where the job has
one) and ``mindwatch report``'s HTML page, rendered once however many trackers take it.

Read on the trackers' own thread after the ``end`` record and the job log are written (at
``close``): a run of hours reads in seconds, which the tracker's bounded drain covers."""
from __future__ import annotations

import os
import tempfile
import threading
from dataclasses import dataclass

from ..report.run_page import write_run_report
from ..report.summary import summarize_dir
from ..runlog import RunLogError

REPORT_NAME = "report.html"


@dataclass(frozen=True)
class Closing:
    verdict: str              # as `mindwatch summary` says it ("1 ANOMALY, STOPPED", "HEALTHY")
    report: str | None        # the HTML page's path (a temporary directory's), None if unread
    problem: str | None       # why the page or the verdict could not be read


_lock = threading.Lock()
_done: dict[str, tuple[float, Closing]] = {}
_pages: tempfile.TemporaryDirectory | None = None    # removed when the process exits


def closing(log_dir: str, fallback_verdict: str) -> Closing:
    """The verdict and the page of ``log_dir`` as it stands now (rendered again once its
    rank logs changed: a second segment of the same directory); ``fallback_verdict`` when
    the logs cannot be read."""
    stamp = _stamp(log_dir)
    with _lock:
        found = _done.get(log_dir)
        if found is not None and found[0] == stamp:
            return found[1]
        try:
            verdict = str(summarize_dir(log_dir)["verdict"])
            folder = os.path.join(_page_dir(), str(len(_done)))
            os.makedirs(folder, exist_ok=True)
            output = os.path.join(folder, REPORT_NAME)
            result = Closing(verdict, write_run_report(log_dir, output), None)
        except (RunLogError, OSError, ValueError) as exc:
            result = Closing(fallback_verdict, None, f"{type(exc).__name__}: {exc}")
        _done[log_dir] = (stamp, result)
        return result


def _page_dir() -> str:
    global _pages
    if _pages is None:
        _pages = tempfile.TemporaryDirectory(prefix="mindwatch-report-")
    return _pages.name


def _stamp(log_dir: str) -> float:
    """The latest modification of the directory's logs: a segment written since changes it."""
    latest = 0.0
    try:
        for entry in os.scandir(log_dir):
            if entry.name.endswith(".jsonl"):
                latest = max(latest, entry.stat().st_mtime)
    except OSError:
        pass
    return latest
