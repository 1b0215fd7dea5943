"""``mindwatch summary`` of a job (a run directory of several ranks): one answer for the job,
from its job view (runlog/job/view.py: ``job.jsonl``, else the rank logs condensed), in at
most ``MAX_LINES`` lines whatever the number of ranks (summary_text.py).

The verdict's rules are the single rank's (report/summary.py), said of the job: its
anomalies are its events (one per step, however many ranks found it or followed it), a hang
names the ranks it concerns as a set, a silent rank (no record since start-up, or quiet
while the job went on) is named, and the ending is the job's (the job log's ``end``; from
rank logs, every rank's latest segment). Exit 0 only when the job's latest segment ended
``completed`` with no event, hang or silent rank, and was watched.

The JSON is the single rank's keys that speak for the job (``directory``, ``healthy``,
``verdict``, ``anomalies``: the job's events of the latest segment, ``earlier_anomalies``,
``segments``, ``skipped_lines``, ``hangs``, ``goodput``, ``exit_code``), and ``job``: its
``source``, ``world_size``, ``hosts``, ``steps``, ``loss``, ``end``, ``events``,
``standouts``, ``silent`` and ``goodput``. From rank logs, every per-rank key is kept too
(``ranks``, ``spread``, ...): they were read anyway.
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from ... import records
from ...basics import format as fmt
from ...basics.rank_set import rank_list_text, ranks_in
from ...job_schema import Event, JobHang
from ...records import Common, End
from ...runlog.job.condense import HANG_RECORDS
from ...runlog.job.view import JOB_LOG, SEGMENT
from ..watched import NO_VALUES, NOT_WATCHED
from .hangs import hangs_of, hung_ranks
from .standouts import standouts

SHOWN_HEARD = 16            # silent ranks whose heartbeat is read (the text names 3 groups)

if TYPE_CHECKING:
    from ...runlog.job.view import JobView

HEALTHY, ANOMALIES = 0, 1
MAX_LINES = 20
JOB = "job"
_RECORD_KEYS = (Common.KIND, Common.RANK, Common.TIME, HANG_RECORDS)




def rank_word(ranks: list[int]) -> str:
    return f"RANK{'S' if len(ranks) > 1 else ''} {rank_list_text(ranks)}"


def place_of(rank: int, host: Any = None, device: Any = None) -> str:
    """"rank 13 (host node-1, device 13)", "rank 6 (host node-a)", "rank 2"."""
    where = ", ".join(part for part in (f"host {host}" if host is not None else "",
                                         f"device {device}" if device is not None else "")
                      if part)
    return f"rank {rank}" + (f" ({where})" if where else "")


def event_line(view: JobView, event: dict[str, Any]) -> str:
    return event_text(event, view.world_size, view.places, view.segments)


def event_text(event: dict[str, Any], world_size: int,
               places: dict[int, tuple[str | None, int | None]], segments: int = 1) -> str:
    """"loss_nonfinite at step 20 on rank 13 (host node-1, device 13) [stop on all 16
    ranks]": the kinds, the step, where it came from (its own place, else the job's
    ``places``), the replay's verdict, what every rank did; an event of an earlier of the
    job's ``segments`` says which."""
    origin = event.get(Event.ORIGIN_RANK)
    ranks = ranks_in(event.get(Event.RANKS))
    count = event.get(Event.RANK_COUNT) or len(ranks)
    if isinstance(origin, int):
        host, device = event.get(Event.ORIGIN_HOST), event.get(Event.ORIGIN_DEVICE)
        if host is None and device is None:
            host, device = places.get(origin, (None, None))
        where = place_of(origin, host, device)
        if count > 1:
            where += f", found on {fmt.count(count, 'rank')}"
    elif ranks:
        where = f"rank{'s' if len(ranks) > 1 else ''} {rank_list_text(ranks, 40)}"
    else:
        where = "an unknown rank"
    actions = [str(a) for a in event.get(Event.ACTIONS) or ["warn"]]
    acted = "+".join(actions) + ("" if actions == ["warn"] else
                                 f" on all {fmt.count(world_size, 'rank')}")
    checkpoint = event.get(Event.CHECKPOINT)
    verdict = event.get(Event.REPLAY_VERDICT)
    step = event.get(Event.STEP)
    when = f"at step {step}" if step else "before the first step"
    return (f"{', '.join(map(str, event.get(Event.KINDS) or ()))} {when} on {where}"
            + (f": {verdict}" if verdict else "")
            + f" [{acted}" + (f" -> {checkpoint}" if checkpoint else "") + "]"
            + ("" if event.get(SEGMENT, segments) == segments else
               f" (segment {event.get(SEGMENT)} of {segments})"))


def _events(view: JobView) -> list[dict[str, Any]]:
    return [{**{k: v for k, v in event.items() if k not in _RECORD_KEYS},
             "line": event_line(view, event)} for event in view.events]


def verdict(view: JobView, events: int, hangs: list[dict[str, Any]], endings: list[str],
            unwatched: str | None) -> str:
    """The single rank's words (report/summary.py), said of the job."""
    from ...runlog.job.silent_ranks import NO_LOG, NO_RECORD
    from ..summary import NO_END, ending_words

    words = [fmt.count(events, "ANOMALY", "ANOMALIES")] if events else []
    hung = hung_ranks(hangs)
    if hung:
        words.append(f"HUNG ON {rank_word(hung)}")
    elif hangs:
        words.append("HUNG")
    # a rank that went quiet has no end record: the ending says it (NO END RECORD), the
    # silent line which; a rank that never wrote a record has no ending to say it
    mute = sorted(rank for rank, why in view.silent.items() if why in (NO_RECORD, NO_LOG))
    if mute:
        words.append(f"SILENT {rank_word(mute)}")
    quiet = len(mute) < len(view.silent) and NO_END not in endings
    words += ending_words([*endings, *([NO_END] if quiet else [])], anomalies=events)
    return ", ".join(words + ([unwatched] if unwatched else [])) or "HEALTHY"


def _measured(view: JobView) -> bool:
    """Whether the latest segment's job steps hold a loss or a gradient norm."""
    import numpy as np

    start = view.segment_starts[-1] if view.segment_starts else 0
    return bool(np.isfinite(view.loss[start:]).any() or np.isfinite(view.grad_norm[start:]).any()
                or len(view.steps[start:]) == 0)


def job_summary(view: JobView, ranks: dict[str, Any] | None = None) -> dict[str, Any]:
    """The job's summary; ``ranks``: the per-rank summary (``summary.summarize``) of the
    rank logs the view was condensed from, None for a view of the job log."""
    import numpy as np

    from ...runlog.job.silent_ranks import NO_RECORD
    from ...runlog.job.silent_ranks import heard as heartbeats_of
    from ..summary import GOODPUT, NO_END

    latest = [e for e in view.events if e.get(SEGMENT, view.segments) == view.segments]
    hangs = hangs_of(view)
    # where each silent rank was when it went quiet, from its heartbeat (a few ranks' files)
    heard = heartbeats_of(view.directory, list(view.silent)[:SHOWN_HEARD])
    # a hang the job log has no event for (it tells hangs apart) is one anomaly more
    count = len(latest) + len({h.get(JobHang.STEP) or None for h in hangs}   # 0: none yet
                              - {e.get(Event.STEP) or None for e in latest})
    if ranks is not None:
        # a rank log without a record has no ending: its silence is named instead
        endings = [r["end"] for r in ranks["ranks"] if view.silent.get(r["rank"]) != NO_RECORD]
        unwatched = _not_watched(ranks) if ranks.get("unwatched") else None
        figures = ranks.get(GOODPUT)
    else:
        end = view.latest_end
        endings = [str(end.get(End.REASON))] if end is not None else [NO_END]
        unwatched = None if _measured(view) else f"{NOT_WATCHED}: {NO_VALUES}"
        figures = end.get("goodput") if end is not None else _rank0_goodput(view)
    healthy = not count and not view.silent and \
        all(e == records.COMPLETED for e in endings) and not unwatched
    finite = np.flatnonzero(np.isfinite(view.loss))
    steps = view.steps
    job = {
        "source": view.source, "world_size": view.world_size,
        "hosts": len({host for host, _ in view.places.values()}),
        "steps": {"first": int(steps[0]) if len(steps) else None,
                  "last": int(steps[-1]) if len(steps) else None, "count": len(steps)},
        "loss": {"first": float(view.loss[finite[0]]) if len(finite) else None,
                 "last": float(view.loss[finite[-1]]) if len(finite) else None,
                 "latest": float(view.loss[-1]) if len(steps) else None},
        "end": endings[0] if ranks is None else _worst(endings),
        "events": _events(view),
        "standouts": [{**entry, "host": view.places.get(entry["rank"], (None, None))[0]}
                      for entry in standouts(view)],
        "silent": [{"rank": rank, "host": view.places.get(rank, (None, None))[0],
                    "why": why, **({"heard": heard[rank]} if rank in heard else {})}
                   for rank, why in view.silent.items()],
        "hangs": hangs, GOODPUT: figures}
    out = dict(ranks or {})
    out.update({
        "directory": view.directory, "healthy": healthy,
        "verdict": verdict(view, count, hangs, endings, unwatched),
        "anomalies": count, "earlier_anomalies": len(view.events) - len(latest),
        "segments": view.segments, GOODPUT: figures,
        "skipped_lines": (ranks or {}).get("skipped_lines", 0) + (
            view.skipped_lines if view.source == JOB_LOG else 0),
        "hangs": hangs if ranks is None else ranks.get("hangs", hangs),
        JOB: job, "exit_code": HEALTHY if healthy else ANOMALIES})
    return out


def _worst(endings: list[str]) -> str | None:
    """The job's ending from its ranks': the first that is not ``completed``."""
    return next((e for e in endings if e != records.COMPLETED), endings[0] if endings else None)


def _not_watched(ranks: dict[str, Any]) -> str | None:
    from ..watched import not_watched

    by_rank: dict[int, list[str]] = {}
    for entry in ranks.get("unwatched") or ():
        by_rank.setdefault(entry["rank"], []).append(entry["fix"])
    return not_watched(by_rank, len(ranks["ranks"]))


def _rank0_goodput(view: JobView) -> dict[str, Any] | None:
    """A job log without its end: the goodput of rank 0's log, when it is here (the job
    log's writer; its time is lost with every other rank's)."""
    from ...runlog.goodput import goodput
    from ...runlog.job.view import rank_log

    try:
        log = rank_log(view.directory, 0)
    except ValueError:              # not a run log: the goodput is not known
        return None
    figures = goodput([log.scan]) if log is not None else None
    return figures if figures is None or math.isfinite(figures["share"]) else None
