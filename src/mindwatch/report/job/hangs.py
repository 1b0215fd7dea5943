"""The hangs of a job's summary (summary.py): the rank logs' (condensed), or the job
log's ``hang`` records and its events of kind ``hang``, each with where its first few ranks
waited (their rank logs' hang records, found by their bytes: runlog/job/hangs.py).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ... import records
from ...anomaly import HANG
from ...basics.rank_set import rank_set, ranks_in
from ...job_schema import Event, JobEnd, JobHang
from ...records import Anomaly, Common, End
from ...runlog.heartbeats import read_answer
from ...runlog.job.condense import HANG_RECORDS
from ...runlog.job.view import JOB_LOG, SEGMENT

if TYPE_CHECKING:
    from ...runlog.job.view import JobView

_RECORD_KEYS = (Common.KIND, Common.RANK, Common.TIME, HANG_RECORDS)
_HANG_FIELDS = (Common.RANK, Anomaly.STEP, Anomaly.VALUE, Anomaly.WHERE)
SHOWN_HANGS = 3              # ranks of a hang told with where they waited


def hangs_of(view: JobView) -> list[dict[str, Any]]:
    """The hangs of the latest segment: the rank logs' (condensed: the ranks that reported
    it, the first few with where they waited), or the job log's ``hang`` records (the
    ranks waited for) and its events of kind ``hang``, each with where its first few ranks
    waited (their logs' hang records, found by their bytes). A job log that names no hang
    while its goodput counts hang time (or it has no end) has its rank logs searched."""
    found = []
    for hang in view.hangs:
        if hang.get(SEGMENT, view.segments) != view.segments:
            continue
        entry = {k: v for k, v in hang.items() if k not in _RECORD_KEYS}
        entry["records"] = [_hang_fields(r) for r in hang.get(HANG_RECORDS) or ()]
        found.append(entry)
    found = _with_answer(view, found)
    if view.source != JOB_LOG:
        return found
    for entry in found:
        entry["records"] = _records_of(view, ranks_in(entry.get(JobHang.WAITING_FOR)),
                                       entry.get(JobHang.STEP))
    told = {h.get(JobHang.STEP) for h in found}
    for event in view.events:
        if HANG in (event.get(Event.KINDS) or ()) and event.get(Event.STEP) not in told \
                and event.get(SEGMENT, view.segments) == view.segments:
            found.append({JobHang.STEP: event.get(Event.STEP), JobHang.WAITING_FOR: None,
                          JobHang.MESSAGE: None, "ranks": event.get(Event.RANKS),
                          "records": _records_of(view, ranks_in(event.get(Event.RANKS)),
                                                 event.get(Event.STEP))})
    return found or _searched(view)


def _with_answer(view: JobView, found: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The job's answer from the heartbeats (``heartbeats/hang_answer.json``) when the job
    log holds none of the latest segment: the ranks never exchanged (a rank that never
    started), or rank 0 was gone. It stands for the rank logs' hang of its step."""
    if any(h.get(JobHang.HOLDER_COUNT) is not None for h in found):
        return found
    answer = read_answer(view.directory)
    started = view.runs[-1].get(Common.TIME) if view.runs else None
    if answer is None or answer.get(JobHang.HOLDER_COUNT) is None or not isinstance(
            answer.get(Common.TIME), (int, float)) or \
            (isinstance(started, (int, float)) and answer[Common.TIME] < started):
        return found
    entry = {k: v for k, v in answer.items() if k not in _RECORD_KEYS}
    entry["records"] = []
    # the rank logs' hang of that stall: its step, or none before the first step
    steps = {answer.get(JobHang.STEP), answer.get(JobHang.STEP) or None}
    return [h for h in found if h.get(JobHang.STEP) not in steps] + [entry]


def _hang_fields(record: dict[str, Any]) -> dict[str, Any]:
    return {name: record.get(name) for name in _HANG_FIELDS}


def _records_of(view: JobView, ranks: list[int], step: Any) -> list[dict[str, Any]]:
    """The latest hang at or before ``step`` of the first few ``ranks``' logs."""
    from ...basics.run_dir import rank_log_path
    from ...runlog.job.hangs import latest_hangs

    found = []
    for rank in ranks[:SHOWN_HANGS]:
        hangs = [h for h in latest_hangs(rank_log_path(view.directory, rank))
                 if not isinstance(step, int) or not isinstance(h.get(Anomaly.STEP), int)
                 or h[Anomaly.STEP] <= step]
        if hangs:
            found.append(_hang_fields({**hangs[-1], Common.RANK: rank}))
    return found


def _searched(view: JobView) -> list[dict[str, Any]]:
    """The hangs of the rank logs, one per step, when the job log tells of a hang without
    naming it: no end record, an abort, or hang time in its goodput."""
    from ...runlog.job.hangs import search

    end = view.latest_end
    lost = ((end or {}).get(JobEnd.GOODPUT) or {}).get("lost_s") or {}
    if end is not None and end.get(End.REASON) != records.ABORTED \
            and not (isinstance(lost.get(HANG), (int, float)) and lost[HANG] > 0):
        return []
    hangs = search(view.directory)
    by_step: dict[Any, list[dict[str, Any]]] = {}
    for record in hangs.found:
        by_step.setdefault(record.get(Anomaly.STEP), []).append(record)
    found = []
    for step, told in by_step.items():
        ranks = sorted({r[Common.RANK] for r in told if isinstance(r.get(Common.RANK), int)})
        entry = {JobHang.STEP: step, JobHang.WAITING_FOR: None, JobHang.MESSAGE: None,
                 "ranks": rank_set(ranks),
                 "records": [_hang_fields(r) for r in sorted(
                     told, key=lambda r: r.get(Common.RANK) or 0)[:SHOWN_HANGS]]}
        if hangs.searched < hangs.logs:
            entry["searched"] = f"{hangs.searched} of {hangs.logs} rank logs searched"
        found.append(entry)
    return found


def hung_ranks(hangs: list[dict[str, Any]]) -> list[int]:
    ranks: set[int] = set()
    for hang in hangs:
        ranks.update(ranks_in(hang.get(JobHang.WAITING_FOR) or hang.get("ranks")))
    return sorted(ranks)
