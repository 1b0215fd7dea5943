"""The job's view condensed from its rank logs (``view.condense``), for a run directory
without ``job.jsonl`` (older runs, copies of rank logs): what rank 0 would have written.

Each step's values across ranks are reduced as job/fields.py declares (the loss's mean, the
gradient norm's max, the step time's spread), a block of steps at a time over a (ranks,
steps) matrix, so that 1024 ranks x 200k steps never hold the whole matrix (~1M cells a
block; a heatmap bin is never cut). The rank logs' step columns hold the step time, not the
data time, the local gradient norm or the memory: those spreads stay unknown (NaN) here,
and the ranks' data times are their logged sums (``RankScan.times``). Anomalies become one
event per step, as rank 0's job log groups them (job/events.py): the kinds the ranks found,
the ranks, the origin (a gradient anomaly's ``origin_rank``, else the rank a ``peer_stop``
follows, else the one rank that found anything), rank 0's actions, message, report and
checkpoint. ``hang`` anomalies are also the job's hangs, one per step, with the first few
ranks' records (where each waited).
"""
from __future__ import annotations

import re
import warnings
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ...anomaly import HANG, PEER_STOP
from ...basics.rank_set import rank_set
from ...events import group, job_event
from ...job_schema import EVENT, JOB_RANKS, JobHang, JobRanks, bin_steps
from ...job_schema import HANG as HANG_KIND
from ...records import Anomaly, Common, Step
from ..lines import Record
from .columns import BINNED, SEGMENT, floats

if TYPE_CHECKING:
    import numpy as np

    from ..scan import RankScan

BLOCK_CELLS = 2**20          # cells of one (ranks, steps) block: 8 MB a matrix of float64
_PEER = re.compile(r"rank (\d+) stopped the run at step \d+ \(([a-z_]+)\)")
HANG_RECORDS = "records"     # a condensed hang's anomaly records (the first few ranks')
SHOWN_HANGS = 3


def step_axis(scans: Sequence[RankScan]) -> tuple[np.ndarray, list[tuple[np.ndarray,
                                                                          np.ndarray]]]:
    """Every step any rank logged (ascending), and per rank its own steps (ascending, each
    once) with the index of each one's last record (a resumed run logs a step again)."""
    import numpy as np

    per_rank = []
    for scan in scans:
        steps = floats(list(scan.steps[Step.STEP]))
        reverse = steps[::-1]
        unique, first = np.unique(reverse, return_index=True)
        keep = ~np.isnan(unique)
        per_rank.append((unique[keep], (len(steps) - 1 - first)[keep]))
    union = np.unique(np.concatenate([u for u, _ in per_rank])) if per_rank else np.zeros(0)
    return union, per_rank


def blocks(steps: np.ndarray, ranks: int) -> list[tuple[int, int, list[tuple[int, int]]]]:
    """Blocks of whole heatmap bins (job/rank_bins.py), each (start, stop, its bins as
    (start, stop) indexes into ``steps``), of about BLOCK_CELLS cells."""
    import numpy as np

    bins: list[tuple[int, int]] = []
    index = 0
    while index < len(steps):
        first = int(steps[index])
        span = bin_steps(first)
        end = -(-first // span) * span
        stop = max(index + 1, int(np.searchsorted(steps, end, side="right")))
        bins.append((index, stop))
        index = stop
    out: list[tuple[int, int, list[tuple[int, int]]]] = []
    width = max(1, BLOCK_CELLS // max(1, ranks))
    for start, stop in bins:
        if out and stop - out[-1][0] <= width:
            out[-1] = (out[-1][0], stop, [*out[-1][2], (start, stop)])
        else:
            out.append((start, stop, [(start, stop)]))
    return out


def reduce_steps(scans: Sequence[RankScan], ranks: Sequence[int]) -> dict[str, Any]:
    """The job_step columns (``JobView``'s) and the step-time bins, from the ranks' scans."""
    import numpy as np

    steps, per_rank = step_axis(scans)
    known_of = [_known(scan.steps[Step.LOSS]) for scan in scans]
    loss_of = [floats(list(scan.steps[Step.LOSS])) for scan in scans]
    norm_of = [floats(list(scan.steps.get(Step.GRAD_NORM, ()))) for scan in scans]
    time_of = [floats(list(scan.steps[Step.STEP_TIME_S])) for scan in scans]
    skip_of = [np.isin(np.arange(scan.step_count), list(scan.times.skipped)) for scan in scans]
    names = ("loss", "known", "norm", "time", "skip")
    columns: dict[str, list[Any]] = {name: [] for name in
                                     ("loss", "grad_norm", "skipped", "min", "median", "max",
                                      "min_rank", "max_rank")}
    bins: list[Record] = []
    rank_array = np.asarray(ranks)
    for start, stop, inside in blocks(steps, len(scans)):
        block = steps[start:stop]
        matrices = {name: np.full((len(scans), len(block)), np.nan) for name in names}
        for row, ((own, last), *values) in enumerate(zip(per_rank, loss_of, known_of,
                                                         norm_of, time_of, skip_of,
                                                         strict=True)):
            if not len(own):
                continue
            at = np.searchsorted(own, block)
            clipped = np.minimum(at, len(own) - 1)
            here = (at < len(own)) & (own[clipped] == block)
            where = last[clipped]
            for name, column in zip(names, values, strict=True):
                if len(column):           # an empty column: a field this scan left out
                    matrices[name][row] = np.where(here, column[where], np.nan)
        _reduce_block(matrices, rank_array, columns)
        for first, last_index in inside:
            times = matrices["time"][:, first - start:last_index - start]
            bins.append(_bin(int(steps[first]), int(steps[last_index - 1]), times))
    out = {name: np.concatenate(found) if found else np.zeros(0)
           for name, found in columns.items()}
    out["steps"], out["bins"] = steps, bins
    return out


def _known(column: Sequence[Any]) -> np.ndarray:
    import numpy as np

    if None not in column:            # an array("d"): every value known (C-level check)
        return np.ones(len(column))
    return np.fromiter((v is not None for v in column), float, len(column))


def _reduce_block(matrices: dict[str, np.ndarray], ranks: np.ndarray,
                  columns: dict[str, list[Any]]) -> None:
    """One block's reductions, as job/fields.py's: the mean loss and the max norm (a
    non-finite value on any rank wins), the step time's spread over its finite values."""
    import numpy as np

    loss, known = matrices["loss"], matrices["known"] == 1
    counted = known.sum(axis=0)
    with np.errstate(invalid="ignore", divide="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        total = np.where(known, loss, 0.0).sum(axis=0)
        columns["loss"].append(np.where(counted > 0, total / np.maximum(counted, 1), np.nan))
        norm = matrices["norm"]
        seen = ~np.isnan(norm)
        highest = np.where(seen, norm, -np.inf).max(axis=0)
        columns["grad_norm"].append(np.where(seen.any(axis=0), highest, np.nan))
        columns["skipped"].append((matrices["skip"] == 1).any(axis=0).astype(float))
        time = matrices["time"]
        finite = np.isfinite(time)
        some = finite.any(axis=0)
        low = np.where(finite, time, np.inf).argmin(axis=0)
        high = np.where(finite, time, -np.inf).argmax(axis=0)
        take = np.arange(time.shape[1])
        columns["min"].append(np.where(some, time[low, take], np.nan))
        columns["max"].append(np.where(some, time[high, take], np.nan))
        columns["median"].append(np.nanmedian(np.where(finite, time, np.nan), axis=0))
        columns["min_rank"].append(np.where(some, ranks[low], -1))
        columns["max_rank"].append(np.where(some, ranks[high], -1))


def _bin(first: int, last: int, times: np.ndarray) -> Record:
    """A ``job_ranks`` record of the step times (each rank's mean over the bin)."""
    import numpy as np

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        mean = np.nanmean(times, axis=1) if times.shape[1] else np.full(len(times), np.nan)
    record: Record = {Common.KIND: JOB_RANKS, JobRanks.STEP_FROM: first,
                      JobRanks.STEP: last}
    for name in BINNED:
        record[name] = mean if name == JobRanks.STEP_TIME_S else None
    return record


def events_and_hangs(anomalies: Sequence[tuple[int, int, Record]],
                     places: dict[int, tuple[str | None, int | None]]
                     ) -> tuple[list[Record], list[Record]]:
    """The job's events and hangs from ``(segment, rank, anomaly record)`` triples."""
    by_step: dict[tuple[int, Any], list[Record]] = {}
    for segment, _, record in anomalies:
        by_step.setdefault((segment, record.get(Anomaly.STEP)), []).append(record)
    events, hangs = [], []
    for (segment, step), found in sorted(by_step.items(), key=lambda item: (
            item[0][0], item[0][1] if isinstance(item[0][1], int) else -1)):
        hung = [r for r in found if r.get(Anomaly.ANOMALY) == HANG]
        if hung:
            hangs.append(_hang(segment, step, hung))
        events.append(_event(segment, step, found, places))
    return events, hangs


def _hang(segment: int, step: Any, found: list[Record]) -> Record:
    ranks = sorted({int(r[Common.RANK]) for r in found if isinstance(r.get(Common.RANK), int)})
    return {Common.KIND: HANG_KIND, JobHang.STEP: step, JobHang.WAITING_FOR: None,
            JobHang.MESSAGE: found[0].get(Anomaly.MESSAGE), "ranks": rank_set(ranks),
            HANG_RECORDS: sorted(found, key=lambda r: r.get(Common.RANK) or 0)[:SHOWN_HANGS],
            SEGMENT: segment}


def _event(segment: int, step: Any, found: list[Record],
           places: dict[int, tuple[str | None, int | None]]) -> Record:
    ranks_of: dict[str, set[int]] = {}
    for record in found:
        rank = record.get(Common.RANK)
        kind = str(record.get(Anomaly.ANOMALY))
        if kind == PEER_STOP:
            peer = _PEER.search(str(record.get(Anomaly.MESSAGE) or ""))
            if peer is not None and not any(r.get(Anomaly.ANOMALY) != PEER_STOP for r in found):
                ranks_of.setdefault(peer.group(2), set()).add(int(peer.group(1)))
        elif isinstance(rank, int):
            ranks_of.setdefault(kind, set()).add(rank)
    named = next((r for r in found if isinstance(r.get(Anomaly.ORIGIN_RANK), int)), None)
    if named is not None:
        origin = named[Anomaly.ORIGIN_RANK]
        place = (named.get(Anomaly.ORIGIN_HOST), named.get(Anomaly.ORIGIN_DEVICE))
    else:
        peers = [_PEER.search(str(r.get(Anomaly.MESSAGE) or "")) for r in found
                 if r.get(Anomaly.ANOMALY) == PEER_STOP]
        origin = next((int(p.group(1)) for p in peers if p is not None), None)
        place = (None, None)
    # rank 0's decision is the job's (the lowest rank's, when rank 0's log has none here)
    lowest = min((int(r[Common.RANK]) for r in found if isinstance(r.get(Common.RANK), int)),
                 default=None)
    own = [r for r in found if r.get(Common.RANK) == lowest]
    lead = group(own)[0] if own else None
    first = next((r for r in own if r.get(Anomaly.ANOMALY) != PEER_STOP),
                 own[0] if own else None)
    fields = job_event(
        step, ranks_of, named=origin, place=place, places=places,
        actions=lead.actions if lead is not None else [],
        message=first.get(Anomaly.MESSAGE) if first is not None else None,
        report=next((r.get(Anomaly.REPORT) for r in own if r.get(Anomaly.REPORT)), None),
        checkpoint=next((r.get(Anomaly.CHECKPOINT) for r in own
                         if r.get(Anomaly.CHECKPOINT)), None),
        verdict=next((r.get(Anomaly.REPLAY_VERDICT) for r in own
                      if r.get(Anomaly.REPLAY_VERDICT)), None))
    return {Common.KIND: EVENT, **fields, SEGMENT: segment}
