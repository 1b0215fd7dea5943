"""The HTML page of one run directory, as ``mindwatch report RUN_DIR`` writes it: a job's page
from ``job.jsonl`` and the ranks it names (never every rank's log), else the run's page from
its rank logs (the first rank's state records drawn)."""
from __future__ import annotations

import os

from ..runlog import FIRST, read_run

MAX_POINTS = 2000


def write_run_report(directory: str, output: str, *, max_points: int = MAX_POINTS) -> str:
    """Write the page of ``directory`` to ``output``; its path. Raises RunLogError when the
    logs cannot be read, OSError when ``output`` cannot be written."""
    if os.path.exists(os.path.join(directory, "job.jsonl")):
        from .job.page import write_job_report

        written = write_job_report(directory, output, max_points=max_points)
        if written is not None:
            return written
    from .html import write_html

    write_html(read_run(directory, states=FIRST), output, max_points=max_points)
    return output
