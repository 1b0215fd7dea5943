"""The job as the views read it (summary, report, watch): from ``job.jsonl`` when the run
directory has one, else condensed the same way from the rank logs (older runs, copies of rank
logs), so a view answers for the job alike either way (docs/log-format.md#the-job-log).

Its cost does not grow with the number of ranks: from ``job.jsonl``, one file and never a
rank log (a view opens a rank log only for the ranks it names, ``rank_log``); the heatmap's
bins are each rank's values, which is all a view needs of every rank. Of the rank logs only
the last block is read, to name the silent ranks (silent_ranks.py). A rank log absent from the
directory is not a silent rank here: rank logs may stay on each host's disk, and the job log
speaks for every rank.

Sizes this is written for: 4096 ranks x 200k steps is a ~100 MB job.jsonl (200k job_step
lines of ~450 bytes, ~300 job_ranks bins of 4096 x 4 values); ``read_job`` within ~1.5 s
(read.py: msgspec by the chunk; ``bins=False`` leaves the bins undecoded).
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from ...basics.rank_set import ranks_in
from ...basics.run_dir import rank_logs
from ...job_schema import JOB_FILE, JobHang, JobRanks, JobRun, JobStep, Place
from ...records import Run
from ..lines import Record, RunLogError
from ..reader import RankLog, RunLog
from ..scan import RankScan
from . import silent_ranks
from .columns import SEGMENT, SPREAD_FIELDS, SPREADS
from .ranks import rank_log, read_ranks
from .read import read_parts

# read_ranks and rank_log (ranks.py) are the rank logs a job view reads: here with it
__all__ = ["JOB_LOG", "RANK_LOGS", "SEGMENT", "JobView", "SpreadColumns", "condense",
           "places_of", "rank_log", "read_job", "read_ranks"]

JOB_LOG, RANK_LOGS = JOB_FILE, "rank logs"    # a view's source


@dataclass
class SpreadColumns:
    """One Spread field of job_step over the steps (``JobView.steps`` order): arrays of
    float (NaN: unknown) and int (-1: unknown) ranks."""
    min: Any
    median: Any
    max: Any
    min_rank: Any
    max_rank: Any


@dataclass
class JobView:
    directory: str
    source: str                              # JOB_LOG or RANK_LOGS
    world_size: int
    # rank -> (host, device) of the latest run record (JobRun.HOSTS, expanded)
    places: dict[int, tuple[str | None, int | None]]
    runs: list[dict[str, Any]]               # the job's run records (one per segment)
    steps: Any                               # int array: the job_step records' steps
    loss: Any                                # float arrays, NaN where null
    grad_norm: Any
    skipped: Any                             # bool array
    spreads: dict[str, SpreadColumns]        # step_time_s, data_time_s, local_grad_norm, memory_mb
    events: list[dict[str, Any]]             # event records, in order (each with SEGMENT)
    hangs: list[dict[str, Any]]              # hang records (each with SEGMENT)
    # job_ranks records, in order; each binned field a float array over the ranks (NaN:
    # unknown or not finite), or None. Condensed: the step times only.
    bins: list[dict[str, Any]]
    ends: list[dict[str, Any]]               # end records (goodput in each; with SEGMENT)
    # ranks whose rank log has no record, or whose latest segment has no end record:
    # rank -> one line ("no record since start-up", "last seen at step 41, 12:03:05")
    silent: dict[int, str] = field(default_factory=dict)
    segments: int = 1                        # run segments (a resumed job has several)
    segment_starts: list[int] = field(default_factory=list)   # index of each one's first step
    ended: bool = False                      # the latest segment has its end record
    # per rank (index: rank), the data time it logged in all, s (NaN: unknown): from the
    # bins (their means x their steps), or the rank logs' sums
    data_time_s: Any = None
    skipped_lines: int = 0
    torn_tail: bool = False

    @property
    def end(self) -> dict[str, Any] | None:
        return self.ends[-1] if self.ends else None

    @property
    def latest_end(self) -> dict[str, Any] | None:
        """The latest segment's end record; None while it has none (running, or died)."""
        return self.end if self.ended else None


def places_of(run: Record | None) -> dict[int, tuple[str | None, int | None]]:
    """``JobRun.HOSTS`` expanded: rank -> (host, device)."""
    found: dict[int, tuple[str | None, int | None]] = {}
    for entry in (run or {}).get(JobRun.HOSTS) or ():
        if not isinstance(entry, dict):
            continue
        ranks = ranks_in(entry.get(Place.RANKS))
        devices = entry.get(Place.DEVICES)
        devices = devices if isinstance(devices, list) else []
        for index, rank in enumerate(ranks):
            device = devices[index] if index < len(devices) else None
            found[rank] = (entry.get(Place.HOST), device if isinstance(device, int) else None)
    return found


def read_job(directory: str, *, bins: bool = True) -> JobView | None:
    """The job view of ``directory`` from its ``job.jsonl``; None when there is none, or
    it holds no record yet. Raises RunLogError when it is not a job log. ``bins``: decode
    the heatmap's bins whole (``summary`` leaves them: of each, msgspec decodes the data
    times alone, each rank's in all; without msgspec none, and the summary reads the data
    times' spreads instead). numpy is imported only once a job log is there: a run
    without one never loads it (a command's address space may be capped)."""
    path = os.path.join(directory, JOB_FILE)
    if not os.path.lexists(path):
        return None
    parts = read_parts(path, bins=bins)
    if parts is None:
        return None
    latest = parts.runs[-1]
    world = latest.get(JobRun.WORLD_SIZE)
    columns = parts.columns
    view = JobView(
        directory=directory, source=JOB_LOG,
        world_size=world if isinstance(world, int) and world > 0 else 1,
        places=places_of(latest), runs=parts.runs,
        steps=_ints(columns[JobStep.STEP]), loss=columns[JobStep.LOSS],
        grad_norm=columns[JobStep.GRAD_NORM], skipped=columns[JobStep.SKIPPED] == 1,
        spreads={name: SpreadColumns(**{sub: _ints(columns[f"{name}.{sub}"])
                                        if sub.endswith("rank") else columns[f"{name}.{sub}"]
                                        for sub in SPREAD_FIELDS}) for name in SPREADS},
        events=parts.events, hangs=parts.hangs, bins=parts.bins, ends=parts.ends,
        segments=len(parts.runs), segment_starts=parts.segment_starts, ended=parts.ended,
        skipped_lines=parts.skipped, torn_tail=parts.torn_tail)
    view.data_time_s = _bin_data_times(view.bins or parts.data_times, view.world_size)
    view.silent = _job_silent(view)
    return view


def _ints(column: Any) -> Any:
    import numpy as np

    return np.where(np.isfinite(column), column, -1).astype(np.int64)


def _bin_data_times(bins: list[Record], world_size: int) -> Any:
    """Each rank's data time in all (s): its bins' means times their steps."""
    import numpy as np

    total, seen = np.zeros(world_size), np.zeros(world_size, bool)
    for record in bins:
        values = record.get(JobStep.DATA_TIME_S)
        if values is None or len(values) != world_size:
            continue
        span = max(1, int(record.get(JobRanks.STEP, 0))
                   - int(record.get(JobRanks.STEP_FROM, 0)) + 1)
        known = np.isfinite(values)
        total += np.where(known, values, 0.0) * span
        seen |= known
    return np.where(seen, total, np.nan)


def _job_silent(view: JobView) -> dict[int, str]:
    """Silent ranks of a view read from the job log (module docstring)."""
    silent = silent_ranks.empty_logs(view.directory)
    for hang in view.hangs:
        if hang.get(SEGMENT) != view.segments:
            continue
        holders = hang.get(JobHang.HOLDERS)
        if isinstance(holders, list):       # answered from heartbeats: the ranks gone
            silent.update({h["rank"]: h["text"] for h in holders if isinstance(h, dict)
                           and h.get("state") in silent_ranks.GONE_HOLDERS
                           and isinstance(h.get("rank"), int) and h["rank"] not in silent})
            continue
        for rank in ranks_in(hang.get(JobHang.WAITING_FOR)):
            silent.setdefault(rank, silent_ranks.last_seen(hang.get(JobHang.STEP), None))
    tails = {rank: found for rank, path in rank_logs(view.directory)
             if rank not in silent and (found := silent_ranks.tail(path)) is not None}
    silent.update(silent_ranks.quiet(tails, job_ended=view.latest_end is not None))
    if not silent and view.latest_end is None and tails and \
            not any(t.ended for t in tails.values()):
        silent = silent_ranks.stopped_first(view.directory, tails)
    return dict(sorted(silent.items()))


def condense(run: RunLog) -> JobView:
    """The job view of a run's rank logs (condense.py), for a directory without
    ``job.jsonl``. A rank whose log holds no record (``RankLog`` with no records: see
    ``job_ranks.read_ranks``) is a silent rank, as is one whose latest segment has no end record
    while the job went on; a rank below the world size without a log, too."""
    import numpy as np

    from ..goodput import goodput
    from .condense import events_and_hangs, reduce_steps

    # a log's scan is made anew on each ask when its records were read (a test's, a view's
    # changes): each taken once here
    every = [(log, log.scan) for log in run.ranks]
    logs = [log for log, scan in every if scan.run is not None]
    if not logs:
        raise RunLogError(f"{run.directory}: no rank log holds a record")
    scans = [scan for _, scan in every if scan.run is not None]
    ranks = [log.rank for log in logs]
    sizes = [s.run.get(Run.WORLD_SIZE) for s in scans if s.run is not None]
    world = max([max(ranks) + 1, *[n for n in sizes if isinstance(n, int)]])
    places: dict[int, tuple[str | None, int | None]] = {
        log.rank: (scan.run.get(Run.HOST), None)
        for log, scan in zip(logs, scans, strict=True) if scan.run}
    segments = max(len(scan.segments) for scan in scans)
    anomalies = [(number + 1 + segments - len(scan.segments), log.rank, record)
                 for log, scan in zip(logs, scans, strict=True)
                 for number, segment in enumerate(scan.segments)
                 for record in segment.anomalies]
    events, hangs = events_and_hangs(anomalies, places)
    reduced = reduce_steps(scans, ranks)
    lowest = scans[0]
    ends = [{**segment.end, SEGMENT: number + 1 + segments - len(lowest.segments)}
            for number, segment in enumerate(lowest.segments) if segment.end]
    ended = lowest.segments[-1].end is not None
    figures = goodput(scans)
    if ends and ended:
        ends[-1]["goodput"] = figures
    time_sums = np.full(world, np.nan)
    for rank, scan in zip(ranks, scans, strict=True):
        if scan.times.data_times:
            time_sums[rank] = scan.times.data_time_s
    unknown = np.full(len(reduced["steps"]), np.nan)
    spreads = {name: SpreadColumns(min=unknown, median=unknown, max=unknown,
                                   min_rank=np.full(len(unknown), -1),
                                   max_rank=np.full(len(unknown), -1)) for name in SPREADS}
    spreads[JobStep.STEP_TIME_S] = SpreadColumns(
        **{sub: reduced[sub].astype(np.int64) if sub.endswith("rank") else reduced[sub]
           for sub in SPREAD_FIELDS})
    view = JobView(
        directory=run.directory, source=RANK_LOGS, world_size=world, places=places,
        runs=[{**lowest.run, JobRun.WORLD_SIZE: world}] if lowest.run else [],
        steps=reduced["steps"].astype(np.int64), loss=reduced["loss"],
        grad_norm=reduced["grad_norm"], skipped=reduced["skipped"] == 1, spreads=spreads,
        events=events, hangs=hangs, bins=reduced["bins"], ends=ends, segments=segments,
        segment_starts=[], ended=ended, data_time_s=time_sums,
        skipped_lines=sum(log.skipped for log in run.ranks))
    view.silent = _condensed_silent(every, world)
    return view


def _condensed_silent(every: list[tuple[RankLog, RankScan]], world: int) -> dict[int, str]:
    silent = silent_ranks.missing((log.rank for log, _ in every), world)
    tails: dict[int, silent_ranks.Tail] = {}
    for log, scan in every:
        if scan.run is None:
            silent[log.rank] = silent_ranks.NO_RECORD
            continue
        steps = scan.steps["step"]
        latest = scan.segments[-1]
        last = steps[latest.stop - 1] if latest.step_count else None
        times = scan.times.segments[-1].last if scan.times.segments else None
        tails[log.rank] = silent_ranks.Tail(ended=latest.end is not None,
                                          step=last if isinstance(last, int) else None,
                                          time=times)
    ended = any(t.ended for t in tails.values())
    silent.update(silent_ranks.quiet(tails, job_ended=ended))
    if not silent and not ended and tails and every:
        silent = silent_ranks.stopped_first(os.path.dirname(every[0][0].path), tails)
    return dict(sorted(silent.items()))
