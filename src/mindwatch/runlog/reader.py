"""Tolerant reading of ``rank_<R>.jsonl`` files.

A log being written, or left by a killed process, may end in a torn line: that one line is
dropped and counted (``RankLog.torn_tail``). A bad line anywhere else is an error
(``lines.LineDecoder``).
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

from .. import records
from ..run_dir import rank_logs, rank_of
from .lines import LineDecoder, RunLogError


@dataclass
class RankLog:
    rank: int
    path: str
    records: List[Dict[str, Any]] = field(default_factory=list)
    torn_tail: bool = False

    def of_kind(self, kind: str) -> List[Dict[str, Any]]:
        return [r for r in self.records if r.get(records.Common.KIND) == kind]

    @property
    def run(self) -> Optional[Dict[str, Any]]:
        runs = self.of_kind(records.RUN)
        return runs[-1] if runs else None

    @property
    def end(self) -> Optional[Dict[str, Any]]:
        last = self.records[-1] if self.records else None
        return last if last and last.get(records.Common.KIND) == records.END else None

    @property
    def steps(self) -> List[Dict[str, Any]]:
        return self.of_kind(records.STEP)

    @property
    def anomalies(self) -> List[Dict[str, Any]]:
        return self.of_kind(records.ANOMALY)


@dataclass
class RunLog:
    directory: str
    ranks: List[RankLog]

    @property
    def anomalies(self) -> List[Dict[str, Any]]:
        return [a for log in self.ranks for a in log.anomalies]


def read_rank_log(path: str, rank: Optional[int] = None) -> RankLog:
    if rank is None:
        rank = rank_of(path)
    log = RankLog(rank=rank, path=path)
    try:
        with open(path, "rb") as handle:
            data = handle.read()
    except OSError as exc:
        raise RunLogError(f"cannot read {path}: {exc.strerror or exc}") from exc
    decoder = LineDecoder(path)
    log.records = decoder.feed(data)
    last, log.torn_tail = decoder.tail()      # no newline yet: written now, or cut by a crash
    if last is not None:
        log.records.append(last)
    return log


def read_run(directory: str) -> RunLog:
    if not os.path.isdir(directory):
        raise RunLogError(f"{directory}: no such run directory")
    ranked = rank_logs(directory)
    if not ranked:
        raise RunLogError(f"{directory}: no rank_<R>.jsonl run logs found; is this a mindwatch "
                          "log_dir?")
    return RunLog(directory=directory, ranks=[read_rank_log(p, r) for r, p in ranked])
