"""Tolerant reading of ``rank_<R>.jsonl`` files.

A log being written, or left by a killed process, may end in a torn line, and a full disk or
a crash followed by ``resume=True`` may leave a torn line in the middle: such lines are
skipped and counted (``RankLog.skipped``, ``torn_tail`` for the last one). A file that is not
a run log at all is an error (``lines.LineDecoder``).

Reading a file yields its scan (``scan.RankScan``: columns, anomalies, run and end records),
which is all that ``summary`` and ``report`` use. ``RankLog.records``, every record as a
dict, is read on first use, from the same bytes (the file's first ``size`` bytes). Several
large logs are read in parallel processes (``parallel.py``).

``state`` records (a few hundred layers' norms each, as many bytes as a hundred steps) are
kept as columns only where a view draws them: ``read_run(states=...)`` says where. ``ALL``
(the default, and ``read_rank_log``'s); ``FIRST``, the first rank that has any, which is all
the report's heatmaps draw (under data parallelism the ranks' weights are the same);
``NONE`` (``summary``, the comparison page). The others' are checked and counted alike, so
every other figure and every skipped line is the same whatever is kept.

The file is read in chunks, so a huge file (or one enormous line) costs at most
``lines.MAX_LINE_BYTES`` plus a chunk of memory beyond what is kept of its records.
"""
from __future__ import annotations

import math
import os
import stat
from collections.abc import Iterator
from functools import partial

from .. import records
from ..basics.run_dir import rank_logs, rank_of
from ..records import Common
from .batch import Batch, BatchDecoder
from .lines import LineDecoder, Record, RunLogError
from .scan import RankScan, Scanner, scan_records

CHUNK_BYTES = 4 * 2**20
# Whose state records read_run keeps as columns (module docstring).
ALL, FIRST, NONE = "all", "first", "none"
STATES = (ALL, FIRST, NONE)


class RankLog:
    """One rank's log: built by ``read_rank_log`` (the scan now, the records when first
    asked for), or from ``records`` in memory."""

    def __init__(self, rank: int, path: str, records: list[Record] | None = None,
                 torn_tail: bool = False, skipped: int = 0,
                 skipped_at: list[int] | None = None, *, scan: RankScan | None = None,
                 size: int = 0):
        self.rank, self.path = rank, path
        self.torn_tail = torn_tail
        self.skipped = skipped                  # lines skipped, the torn tail included
        self.skipped_at = list(skipped_at or ())   # the first few line numbers
        self.size = size                        # bytes read from the file
        self._records = [] if records is None and scan is None else records
        self._scan = scan

    @property
    def records(self) -> list[Record]:
        """Every record, in file order. Once asked for, the views use these records (which
        a caller may change) instead of the scan."""
        if self._records is None:
            self._records = _read_records(self.path, self.size)
        return self._records

    @property
    def scan(self) -> RankScan:
        if self._records is not None:
            return scan_records(self._records)
        assert self._scan is not None
        return self._scan

    def of_kind(self, kind: str) -> list[Record]:
        return [r for r in self.records if r.get(Common.KIND) == kind]

    @property
    def run(self) -> Record | None:
        """The latest ``run`` record."""
        if self._records is None:
            return self.scan.run
        runs = self.of_kind(records.RUN)
        return runs[-1] if runs else None

    @property
    def end(self) -> Record | None:
        """The ``end`` record of the latest segment; None while it has none (running, or
        died). A record written after the ``end`` (a late hardware sample) does not hide it."""
        if self._records is None:
            return self.scan.end
        for record in reversed(self._records):
            kind = record.get(Common.KIND)
            if kind == records.END:
                return record
            if kind == records.RUN:
                return None
        return None

    @property
    def steps(self) -> list[Record]:
        return self.of_kind(records.STEP)

    @property
    def anomalies(self) -> list[Record]:
        return self.scan.anomalies if self._records is None else self.of_kind(records.ANOMALY)

    def __repr__(self) -> str:
        return f"RankLog(rank={self.rank}, path={self.path!r}, skipped={self.skipped})"


class RunLog:
    def __init__(self, directory: str, ranks: list[RankLog]):
        self.directory = directory
        self.ranks = ranks

    @property
    def anomalies(self) -> list[Record]:
        return [a for log in self.ranks for a in log.anomalies]


def _chunks(path: str, limit: int | None = None) -> Iterator[bytes]:
    """The file's bytes (its first ``limit``; None: all) in chunks."""
    try:
        # Not a regular file (a FIFO would block the open, a directory cannot be read).
        if not stat.S_ISREG(os.stat(path).st_mode):
            raise RunLogError(f"{path}: not a regular file; not a mindwatch log")
        with open(path, "rb") as handle:
            left = math.inf if limit is None else limit
            while left > 0 and (chunk := handle.read(int(min(CHUNK_BYTES, left)))):
                left -= len(chunk)
                yield chunk
    except OSError as exc:
        raise RunLogError(f"cannot read {path}: {exc.strerror or exc}") from exc


def _read_records(path: str, limit: int) -> list[Record]:
    decoder = LineDecoder(path)
    found: list[Record] = []
    for chunk in _chunks(path, limit):
        found.extend(decoder.feed(chunk))
    last, _ = decoder.tail()
    if last is not None:
        found.append(last)
    return found


def read_rank_log(path: str, rank: int | None = None, *, states: bool = True,
                  charts: bool = True) -> RankLog:
    """The scan of ``path``; raises RunLogError when it is not a run log. ``states``: keep
    its ``state`` records as columns (else only count them, ``RankScan.state_count``);
    ``charts``: keep what only the report's charts draw (``scan.CHART_FIELDS``' columns,
    the hardware samples)."""
    if rank is None:
        rank = rank_of(path)
    decoder, size = BatchDecoder(path, states=states), 0
    scanner = Scanner(states=states, charts=charts)
    for chunk in _chunks(path):
        size += len(chunk)
        batch = Batch()
        decoder.feed_batch(chunk, batch)
        scanner.add(batch)
    last, torn = decoder.tail()      # no newline yet: written now, or cut by a crash
    if last is not None:
        scanner.add_records([last])
    decoder.check(final=True)
    return RankLog(rank=rank, path=path, torn_tail=torn, skipped=decoder.skipped,
                   skipped_at=list(decoder.skipped_at), scan=scanner.finish(), size=size)


def read_run(directory: str, *, states: str = ALL, charts: bool = True) -> RunLog:
    """Every rank's log of ``directory``, rank by rank; ``states``: whose ``state`` records
    to keep as columns (``ALL``, ``FIRST``, ``NONE``: the module docstring); ``charts``:
    keep what only the report's charts draw (``read_rank_log``)."""
    if states not in STATES:
        raise ValueError(f"states must be one of {STATES}; got {states!r}")
    if not os.path.isdir(directory):
        what = "not a directory" if os.path.exists(directory) else "no such run directory"
        raise RunLogError(f"{directory}: {what}")
    ranked = rank_logs(directory)
    if not ranked:
        raise RunLogError(f"{directory}: no rank_<R>.jsonl run logs found; is this a mindwatch "
                          "log_dir?")
    from .parallel import read_logs
    # FIRST: rank order's first log is kept, the usual holder of the first state records.
    keep = [states == ALL or (states == FIRST and index == 0) for index in range(len(ranked))]
    # FIRST: that log read here, beside the workers: its state columns are never pickled
    logs = read_logs(ranked, partial(read_rank_log, charts=charts), keep,
                     local=0 if states == FIRST else None)
    if states == FIRST:
        holder = next((i for i, log in enumerate(logs) if log.scan.state_count), None)
        if holder is not None and not keep[holder]:     # the first rank had none: read again
            rank, path = ranked[holder]
            logs[holder] = read_rank_log(path, rank, states=True, charts=charts)
    return RunLog(directory=directory, ranks=logs)
