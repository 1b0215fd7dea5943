"""The rank logs a job view reads: every one of a directory condensed (``read_ranks``), where
a log with no record is a silent rank rather than an error, or one a view names
(``rank_log``).
"""
from __future__ import annotations

import os
from functools import partial

from ...basics.run_dir import rank_log_path, rank_logs
from ..parallel import read_logs
from ..reader import NONE, RankLog, RunLog, read_rank_log, read_run
from . import silent_ranks


def rank_log(directory: str, rank: int) -> RankLog | None:
    """The log of one rank a view names (None when it has none, or no record); raises
    RunLogError when it is not a run log."""
    path = rank_log_path(directory, rank)
    if not os.path.exists(path) or silent_ranks.recordless(path):
        return None
    return read_rank_log(path, rank, states=False, charts=False)


def read_ranks(directory: str, *, charts: bool = False) -> RunLog:
    """Every rank log of ``directory`` for a job view: as ``read_run(states=NONE)``, except
    that in a directory of several rank logs one that holds no record (empty, or a torn
    first line) is a ``RankLog`` without records, a silent rank, instead of an error. Alone,
    such a log is still the error it always was."""
    ranked = rank_logs(directory) if os.path.isdir(directory) else []
    empty = {rank for rank, path in ranked if silent_ranks.recordless(path)}
    if len(ranked) < 2 or not empty or len(empty) == len(ranked):
        return read_run(directory, states=NONE, charts=charts)
    readable = [(rank, path) for rank, path in ranked if rank not in empty]
    logs = read_logs(readable, partial(read_rank_log, charts=charts), [False] * len(readable))
    by_rank = {log.rank: log for log in logs}
    return RunLog(directory=directory, ranks=[
        by_rank[rank] if rank in by_rank else RankLog(rank, path, records=[])
        for rank, path in ranked])

