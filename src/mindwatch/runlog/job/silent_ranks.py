"""The ranks a job view must name although they said nothing: a rank log with no record
(empty, or a torn first line: the process died before its first record), and a rank whose
latest segment has no ``end`` record while the job went on without it (``view.py``).

From ``job.jsonl`` the rank logs are not read through: which files are empty is a directory
listing (a file of up to a few KB is opened to look for a newline), and the last block of
each (4 KiB: 16 MB for 4096 ranks) says whether that rank ended, and the step and time it
was last seen at.
"""
from __future__ import annotations

import json
import os
import time
from collections.abc import Iterable
from dataclasses import dataclass

from ... import records
from ...basics.run_dir import rank_logs
from ...records import Common, Step
from .. import heartbeats

NO_RECORD = "no record since start-up"
# The holders of a hang (job/holders.py) whose process is gone or never reached mindwatch:
# silent, where a stuck one is told in the hang's line.
GONE_HOLDERS = ("silent", "absent")
NO_LOG = "no rank log"
# A rank log's last block holds its latest step and end records: 4 KiB for most (a step
# record is ~500 bytes), 64 KiB when a state record (tens of KB) came last.
FIRST_BYTES, TAIL_BYTES = 4 * 2**10, 64 * 2**10
_SMALL = 16 * 2**10         # a log this small may be one torn `run` line: looked into


@dataclass(frozen=True, kw_only=True)
class Tail:
    ended: bool                 # its latest segment has an end record
    step: int | None            # its last step record's step
    time: float | None          # its last record's time


def last_seen(step: int | None, at: float | None) -> str:
    """"last seen at step 41, 12:03:05" (local time), for a rank that went quiet."""
    where = f"last seen at step {step}" if step is not None else "last seen before its first step"
    return where + (f", {time.strftime('%H:%M:%S', time.localtime(at))}" if at else "")


def recordless(path: str) -> bool:
    """Whether the rank log at ``path`` holds no complete line (False when it cannot be
    read: its reader says why, when it is read)."""
    try:
        size = os.stat(path).st_size
        if size == 0:
            return True
        if size > _SMALL:
            return False
        with open(path, "rb") as handle:
            data = handle.read(_SMALL + 1)
    except OSError:
        return False
    return b"\n" not in data.rstrip(b" \t\r") if data.strip() else True


def empty_logs(directory: str) -> dict[int, str]:
    """Rank -> NO_RECORD for each rank log of ``directory`` that holds no record."""
    return {rank: NO_RECORD for rank, path in rank_logs(directory) if recordless(path)}


def tail(path: str) -> Tail | None:
    """What the last block of a rank log says of its end (a small block, then a larger one
    when that holds no step, run or end record); None when it cannot be read."""
    for block in (FIRST_BYTES, TAIL_BYTES):
        try:
            with open(path, "rb") as handle:
                handle.seek(0, os.SEEK_END)
                size = handle.tell()
                handle.seek(max(0, size - block))
                data = handle.read(block)
        except OSError:
            return None
        found = _tail(data.split(b"\n")[1 if size > block else 0:])
        if found is not None or size <= block:
            return found or Tail(ended=False, step=None, time=None)
    return Tail(ended=False, step=None, time=None)


def _tail(lines: list[bytes]) -> Tail | None:
    """What ``lines`` (the block's whole lines) say; None when no step, run or end record
    is among them."""
    ended, step, last = None, None, None
    for raw in reversed(lines):
        try:
            record = json.loads(raw)
        except ValueError:
            continue
        if not isinstance(record, dict):
            continue
        kind = record.get(Common.KIND)
        if last is None and isinstance(record.get(Common.TIME), (int, float)):
            last = float(record[Common.TIME])
        if ended is None and kind in (records.END, records.STEP, records.RUN):
            ended = kind == records.END
        if kind == records.STEP and isinstance(record.get(Step.STEP), int):
            step = record[Step.STEP]
            break
        if kind == records.RUN:
            break
    return None if ended is None else Tail(ended=ended, step=step, time=last)


def quiet(tails: dict[int, Tail], job_ended: bool) -> dict[int, str]:
    """The ranks that went quiet: no end record in their latest segment while the job ended,
    or while another rank logged a later step (when every rank stopped at the same step
    with no end, the job died as one: its verdict says so, no rank is singled out)."""
    latest = max((t.step for t in tails.values() if t.step is not None), default=None)
    return {rank: last_seen(t.step, t.time) for rank, t in sorted(tails.items())
            if not t.ended and (job_ended or (latest is not None and (t.step or 0) < latest))}


def missing(ranks: Iterable[int], world_size: int) -> dict[int, str]:
    """Rank -> NO_LOG for each rank below ``world_size`` not in ``ranks``."""
    present = set(ranks)
    return {rank: NO_LOG for rank in range(world_size) if rank not in present}


def heard(directory: str, ranks: Iterable[int]) -> dict[int, str]:
    """Rank -> what its heartbeat last said (runlog/heartbeats.py), for ``ranks`` that have
    one: where a silent rank was when it went quiet."""
    found = {}
    for rank in ranks:
        beat = heartbeats.read_beat(heartbeats.beat_path(directory, rank))
        if beat is not None and beat.rank == rank:
            found[rank] = heartbeats.last_heard(beat)
    return found


# A rank whose last heartbeat is this many of its periods older than every other's stopped
# first: a live rank's heartbeat is at most one period old when it dies.
FIRST_STOP_PERIODS = 0.5


def stopped_first(directory: str, ranks: Iterable[int]) -> dict[int, str]:
    """When a job died as one (no rank wrote an end record, all at the same step: a launcher
    took the others down), the rank whose heartbeat stopped clearly before every other's:
    the likeliest to have died first. Empty when the heartbeats do not tell (or are absent)."""
    beats = heartbeats.read_beats(directory)
    wanted = [rank for rank in ranks if rank in beats]
    if len(wanted) < 2:
        return {}
    ordered = sorted(wanted, key=lambda rank: beats[rank].time)
    first, second = beats[ordered[0]], beats[ordered[1]]
    gap = second.time - first.time
    if gap <= FIRST_STOP_PERIODS * max(b.interval_s for b in beats.values()):
        return {}
    return {first.rank: f"its heartbeat stopped first, {gap:.1f} s before any other rank's "
                        "(the likeliest to have died first)"}
