"""``mindwatch summary``: a short verdict of a run, as text or JSON.

Healthy (exit 0) means every rank's latest segment ended ``completed``, logged no anomaly and
was watched (report/watched.py). Anything else readable is exit 1, and the verdict names it:
anomalies, then the endings that are not ``completed`` (an error, a signal, an abort, a run
with no ``end`` record because it still runs or died), then NOT WATCHED with the fix.
Unreadable input never gets here (exit 2).

A run resumed into its log directory holds several segments (``runlog/segments.py``). The
verdict, and each rank's figures, are its latest segment's: a resume is how a user answers a
stop, so a clean second segment is a healthy run. Each segment is also listed with its steps,
ending, losses and anomalies, so what the earlier ones did stays in view.
"""
from __future__ import annotations

import statistics
from collections.abc import Mapping
from typing import Any

from .. import records
from ..anomaly import HANG
from ..basics import format as fmt
from ..events import counts, group, summary_entry
from ..records import Anomaly, Common, End, Rewind, Step
from ..runlog import RankScan, RunLog, RunLogError
from ..runlog.bad_batches import read_run_ledger
from ..runlog.goodput import goodput, goodput_text
from ..runlog.segments import Segment
from ..runlog.steps import StepIndex, last_common_step
from .bad_batches_text import ledger_lines
from .spread import STATS, min_median_max, rank_spread, spread_text
from .watched import not_watched, segment_fixes

HEALTHY, ANOMALIES = 0, 1
# Summary keys that are not record fields: a rank's end reason, the anomalies found, and
# the same anomalies as events (one per step: mindwatch.events), which the text lists.
_END, _ANOMALIES, _EVENTS = records.END, "anomalies", "events"
THROUGHPUT = "throughput"            # median tokens/s and MFU per device
NO_END = "running or crashed (no end record)"
# An earlier segment with no `end` record is not running: a later one began after it.
CRASHED = "crashed (no end record)"
_SEGMENTS, _EARLIER = "segments", "earlier_anomalies"
_UNWATCHED = "unwatched"             # the fixes of what kept mindwatch from watching
_LAST_STEP = "last_step"
# The verdict's word for each way a rank can end other than "completed", worst first. A
# "stopped" run with anomalies was stopped by them: the anomalies say it already.
_ENDINGS = {records.ERROR: "FAILED", records.SIGNAL: "STOPPED BY SIGNAL",
            records.ABORTED: "ABORTED", NO_END: "NO END RECORD (running or crashed)",
            records.STOPPED: "STOPPED"}
ANOMALY_FIELDS = (Anomaly.ANOMALY, Anomaly.STEP, Anomaly.ACTIONS, Anomaly.MESSAGE)
REWIND_FIELDS = (Rewind.STEP, Rewind.TO_STEP, Rewind.ANOMALY, Rewind.ORIGIN_RANK)
# One entry of the summary's "hangs": which rank hung, after which step, waiting where.
HANG_FIELDS = (Anomaly.STEP, Anomaly.VALUE, Anomaly.THRESHOLD, Anomaly.WHERE, Anomaly.ACTIONS)
_HANGS = "hangs"
GOODPUT = "goodput"
BAD_BATCHES = "bad_batches"          # bad_batches.jsonl's entries (summarize_dir)


def summarize_dir(directory: str) -> dict[str, Any]:
    """The summary of a run directory: of several ranks, the job's (report/job/summary.py:
    from ``job.jsonl``, reading no rank log; else from the rank logs condensed, where a
    rank log with no record is a silent rank, not an error); of one rank, ``summarize``'s.
    Raises RunLogError when the input cannot be read."""
    from ..runlog.job.view import condense, read_job, read_ranks
    from .job.summary import job_summary

    view = read_job(directory, bins=False)     # the summary draws no heatmap
    if view is not None and view.world_size > 1:
        result = job_summary(view)
    else:
        run = read_ranks(directory)            # it shows no state record, draws no chart
        result = summarize(run)
        if len(run.ranks) > 1:
            result = job_summary(condense(run), result)
    try:
        result[BAD_BATCHES] = read_run_ledger(directory)
    except ValueError as exc:
        raise RunLogError(str(exc)) from exc
    return result


def render(summary: dict[str, Any]) -> str:
    """The text of ``summarize_dir``'s summary: a job's, or a single rank's."""
    from .job.summary import JOB
    from .job.summary_text import render_job_text

    lines = (render_job_text(summary) if JOB in summary else render_text(summary)).split("\n")
    # before the goodput, the summary's last line
    at = len(lines) - 1 if lines[-1].startswith("  goodput") else len(lines)
    lines[at:at] = ["  " + line for line in ledger_lines(summary.get(BAD_BATCHES) or [])]
    return "\n".join(lines)


def summarize(run: RunLog) -> dict[str, Any]:
    ranks: list[dict[str, Any]] = []
    scans = [log.scan for log in run.ranks]
    for log, scan in zip(run.ranks, scans, strict=True):
        steps, latest = scan.steps, scan.segments[-1]
        last, end = scan.step_count - 1, latest.end
        ranks.append({
            Common.RANK: log.rank,
            # the steps its latest segment trained (a resumed one's own, not the run's count),
            # and the run's last step
            End.STEPS: latest.steps_trained,
            _LAST_STEP: steps[Step.STEP][last] if last >= 0 else 0,
            "first_loss": latest.first_loss,
            "last_loss_smooth": latest.last_loss_smooth,
            "skipped_steps": latest.skipped_steps,
            "rewinds": _rewinds(latest),
            Step.TOKENS_PER_S: scan.medians.get(Step.TOKENS_PER_S),
            Step.MFU: scan.medians.get(Step.MFU),
            _END: _ending(latest, latest=True),
            End.ELAPSED_S: end.get(End.ELAPSED_S) if end else None,
            # a run still running: the time to its last step, from its latest step record
            Step.ETA_S: steps[Step.ETA_S][latest.stop - 1]
            if end is None and latest.step_count else None,
            "torn_last_line": log.torn_tail,
            "skipped_lines": log.skipped,
            "skipped_at": list(log.skipped_at),
            _ANOMALIES: _anomalies(latest),
            _EVENTS: _events(latest),
            _UNWATCHED: segment_fixes(latest),
            _SEGMENTS: [_segment(number, segment, len(scan.segments))
                        for number, segment in enumerate(scan.segments, start=1)],
        })
    anomalies = sum(len(r[_ANOMALIES]) for r in ranks)
    spread = _spread(scans, [log.rank for log in run.ranks]) if len(scans) > 1 else None
    unwatched = not_watched({r[Common.RANK]: r[_UNWATCHED] for r in ranks}, len(ranks))
    healthy = anomalies == 0 and all(r[_END] == records.COMPLETED for r in ranks) \
        and unwatched is None
    hangs = [{Common.RANK: log.rank, **{name: a.get(name) for name in HANG_FIELDS}}
             for log, scan in zip(run.ranks, scans, strict=True)
             for a in scan.segments[-1].anomalies if a.get(Anomaly.ANOMALY) == HANG]
    return {"directory": run.directory, "healthy": healthy,
            THROUGHPUT: _throughput(ranks),
            "verdict": _verdict(anomalies, [r[_END] for r in ranks], hangs, unwatched),
            # each rank whose latest segment mindwatch could not watch, with the fix
            _UNWATCHED: [{Common.RANK: r[Common.RANK], "fix": fix}
                         for r in ranks for fix in r[_UNWATCHED]],
            _ANOMALIES: anomalies, "skipped_lines": sum(r["skipped_lines"] for r in ranks),
            # Recovery (on_anomaly "skip" and "rewind"): rewinds happen on every rank at once,
            # so they are counted once per run; withheld updates once per rank.
            "skipped_steps": sum(r["skipped_steps"] for r in ranks),
            "rewinds": max((len(r["rewinds"]) for r in ranks), default=0),
            "ranks": ranks, "spread": spread, _HANGS: hangs,
            _SEGMENTS: max(len(r[_SEGMENTS]) for r in ranks),
            _EARLIER: sum(len(s[_ANOMALIES]) for r in ranks for s in r[_SEGMENTS][:-1]),
            # the productive share of the wall-clock time and the time lost by cause
            GOODPUT: goodput(scans),
            "exit_code": HEALTHY if healthy else ANOMALIES}


def _anomalies(segment: Segment) -> list[dict[str, Any]]:
    return [{name: a.get(name) for name in ANOMALY_FIELDS} for a in segment.anomalies]


def _events(segment: Segment) -> list[dict[str, Any]]:
    return [summary_entry(event) for event in group(segment.anomalies)]


def _rewinds(segment: Segment) -> list[dict[str, Any]]:
    return [{name: r.get(name) for name in REWIND_FIELDS} for r in segment.rewinds]


def _ending(segment: Segment, latest: bool) -> str:
    if segment.end is not None:
        return str(segment.end.get(End.REASON))
    return NO_END if latest else CRASHED


def _segment(number: int, segment: Segment, count: int) -> dict[str, Any]:
    """One segment of a rank, as the summary lists it (``segment`` counts from 1)."""
    end = segment.end
    return {"segment": number, "latest": number == count,
            "first_step": segment.first_step, _LAST_STEP: segment.last_step,
            End.STEPS: segment.steps_trained, "step_records": segment.step_count,
            _END: _ending(segment, latest=number == count),
            End.ELAPSED_S: end.get(End.ELAPSED_S) if end else None,
            "first_loss": segment.first_loss, "last_loss": segment.last_loss,
            "last_loss_smooth": segment.last_loss_smooth,
            "skipped_steps": segment.skipped_steps, "rewinds": _rewinds(segment),
            _ANOMALIES: _anomalies(segment), _EVENTS: _events(segment),
            _UNWATCHED: segment_fixes(segment)}


def _throughput(ranks: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The run's median tokens/s and MFU per device (the median over ranks of each rank's
    median step); None when no rank logged them (no ``tokens_per_sample``)."""
    found = {name: [r[name] for r in ranks if r[name] is not None]
             for name in (Step.TOKENS_PER_S, Step.MFU)}
    if not found[Step.TOKENS_PER_S]:
        return None
    return {name: statistics.median(values) if values else None
            for name, values in found.items()}


def _verdict(anomalies: int, endings: list[str], hangs: list[dict[str, Any]],
             unwatched: str | None = None) -> str:
    words = [fmt.count(anomalies, "ANOMALY", "ANOMALIES")] if anomalies else []
    hung = sorted({h[Common.RANK] for h in hangs})
    if hung:
        words.append(f"HUNG ON RANK{'S' if len(hung) > 1 else ''} {', '.join(map(str, hung))}")
    # last: its fix is a sentence, which may hold commas of its own
    return ", ".join(words + ending_words(endings, anomalies)
                     + ([unwatched] if unwatched else [])) or "HEALTHY"


def ending_words(endings: list[str], anomalies: int = 0) -> list[str]:
    """The verdict's words for the ``endings`` that are not ``completed``, worst first (a
    "stopped" with ``anomalies`` says nothing: they say why)."""
    known = [word for ending, word in _ENDINGS.items() if ending in endings
             and not (ending == records.STOPPED and anomalies)]
    return known + sorted({f"ENDED {e.upper()}" for e in endings
                           if e not in _ENDINGS and e != records.COMPLETED})


def _spread(scans: list[RankScan], ranks: list[int]) -> dict[str, Any] | None:
    """Across ranks: the loss at the last step all ranks logged (a rank whose loss is not
    finite named as such: ``rank_spread``), and each rank's median step time (a straggler
    shows as a wide step-time spread only without data parallelism; with it, see the
    ``straggler`` anomalies). A step logged twice (a resumed run) counts once, with its last
    record."""
    at = [StepIndex(scan.steps[Step.STEP], scan.ascending) for scan in scans]
    last = last_common_step(at)
    if last is None:
        return None
    times = [scan.step_time_median for scan in scans if scan.step_time_median is not None]
    return {Step.STEP: last,
            Step.LOSS: rank_spread({rank: scan.steps[Step.LOSS][index.position(last)]
                                    for rank, index, scan in zip(ranks, at, scans,
                                                                 strict=True)}),
            Step.STEP_TIME_S: min_median_max(times)}


def render_text(summary: dict[str, Any]) -> str:
    lines = [f"{summary['directory']}: {summary['verdict']}" + _segments_note(summary)]
    for rank in summary["ranks"]:
        lines.append(
            f"  rank {rank[Common.RANK]}: {fmt.count(rank[End.STEPS], 'step')}"
            f"{_resumed_range(rank)}, {rank[_END]}"
            + (f" in {fmt.duration(rank[End.ELAPSED_S])}" if rank[End.ELAPSED_S] is not None
               else "")
            + (f", ETA {fmt.duration(rank[Step.ETA_S])}" if rank[Step.ETA_S] is not None else "")
            + f"; loss {fmt.number(rank['first_loss'])} -> "
            f"{fmt.number(rank['last_loss_smooth'])} (smoothed)"
            + (f"; {fmt.count(rank['skipped_steps'], 'update')} withheld"
               if rank["skipped_steps"] else "")
            + (f"; {_rewinds_text(rank['rewinds'])}" if rank["rewinds"] else "")
            + _throughput_note(rank)
            + (f"; {skipped_note(rank['skipped_lines'], rank['skipped_at'])}"
               if rank["skipped_lines"] else ""))
        if len(rank[_SEGMENTS]) == 1:          # one line per event (mindwatch.events)
            lines += [f"    {event['line']}" for event in rank[_EVENTS]]
        else:           # each segment with its own anomalies, the latest one's included
            for segment in rank[_SEGMENTS]:
                lines.append(f"    {_segment_text(segment)}")
                lines += [f"      {event['line']}" for event in segment[_EVENTS]]
    throughput = summary.get(THROUGHPUT)
    if throughput and len(summary["ranks"]) > 1:
        lines.append(_throughput_note(throughput, "  per device, median over ranks: "))
    if summary[_HANGS]:
        lines.append("  hung: " + "; ".join(hang_text(h) for h in summary[_HANGS]))
    spread = summary.get("spread")
    if spread:
        parts = [f"across {len(summary['ranks'])} ranks"]
        if spread[Step.LOSS]:
            parts.append(f"loss at step {spread[Step.STEP]} {spread_text(spread[Step.LOSS])}")
        if spread[Step.STEP_TIME_S]:
            parts.append("median step time min/median/max "
                         + "/".join(fmt.duration(spread[Step.STEP_TIME_S][s]) for s in STATS))
        lines.append("  " + "; ".join(parts))
    if summary.get(GOODPUT):
        lines.append("  " + goodput_text(summary[GOODPUT]))
    return "\n".join(lines)


def _resumed_range(rank: dict[str, Any]) -> str:
    """" (steps 11-20)" after the steps of a rank whose latest segment did not start at step
    1 (a resumed one): its count is its own; "" otherwise."""
    last, count = rank[_LAST_STEP], rank[End.STEPS]
    if not count or last == count:
        return ""
    return f" (step {last})" if count == 1 else f" (steps {last - count + 1}-{last})"


def _segments_note(summary: dict[str, Any]) -> str:
    """" (the latest of 2 segments; 1 anomaly in earlier ones)" after the verdict of a resumed
    run, whose verdict is its latest segment's; "" for a run of one segment."""
    if summary[_SEGMENTS] < 2:
        return ""
    earlier = summary[_EARLIER]
    return (f" (the latest of {summary[_SEGMENTS]} segments"
            + (f"; {fmt.count(earlier, 'anomaly', 'anomalies')} in earlier ones" if earlier
               else "") + ")")


def _segment_text(segment: dict[str, Any]) -> str:
    """"segment 1 (steps 1-6, stopped in 3.00 s), earlier: loss 2 -> 1.9; 1 anomaly": the
    steps it trained (from the step after the one it resumed from)."""
    last, count = segment[_LAST_STEP], segment[End.STEPS]
    first = last - count + 1 if count else segment["first_step"]
    where = ("no steps" if segment["step_records"] == 0 else
             f"step {first}" if first == last else f"steps {first}-{last}")
    ending = segment[_END] + (f" in {fmt.duration(segment[End.ELAPSED_S])}"
                              if segment[End.ELAPSED_S] is not None else "")
    parts = [f"loss {fmt.number(segment['first_loss'])} -> {fmt.number(segment['last_loss'])}"]
    if segment["skipped_steps"]:
        parts.append(f"{fmt.count(segment['skipped_steps'], 'update')} withheld")
    if segment["rewinds"]:
        parts.append(fmt.count(len(segment["rewinds"]), "rewind"))
    parts.append(counts(len(segment[_ANOMALIES]), len(segment[_EVENTS]))
                 if segment[_ANOMALIES] else "no anomaly")
    if segment[_UNWATCHED]:
        parts.append(f"not watched: {'; '.join(segment[_UNWATCHED])}")
    return (f"segment {segment['segment']} ({where}, {ending}), "
            f"{'latest' if segment['latest'] else 'earlier'}: " + "; ".join(parts))


def _rewinds_text(rewinds: list[dict[str, Any]]) -> str:
    """"2 rewinds (step 25 -> 20, step 40 -> 30)"."""
    moves = ", ".join(f"step {r[Rewind.STEP]} -> {r[Rewind.TO_STEP]}" for r in rewinds)
    return f"{fmt.count(len(rewinds), 'rewind')} ({moves})"


def _throughput_note(figures: dict[str, Any], lead: str = "; median ") -> str:
    """"; median 12.3k tok/s, MFU 41.2%" when tokens/s were logged, else ""."""
    if figures.get(Step.TOKENS_PER_S) is None:
        return ""
    mfu = figures.get(Step.MFU)
    return (lead + fmt.rate(figures[Step.TOKENS_PER_S], "tok")
            + (f", MFU {fmt.fraction_percent(mfu)}" if mfu is not None else ""))


def hang_text(hang: Mapping[str, Any]) -> str:
    """"rank 1 after step 5 (no step end for 3.2 s), waiting in f (a.py:3) <- ...", from a
    ``hang`` anomaly record or an entry of the summary's hangs."""
    step = hang.get(Anomaly.STEP)
    return (f"rank {hang.get(Common.RANK)} "
            f"{f'after step {step}' if step else 'before its first step'}"
            f" (no step end for {fmt.duration(hang.get(Anomaly.VALUE))}), waiting in "
            f"{hang.get(Anomaly.WHERE) or 'an unknown place'}")


def skipped_note(count: int, at: list[int]) -> str:
    """"2 unreadable lines skipped (lines 5, 9)", or "" when none was skipped."""
    if not count:
        return ""
    if not at:         # their numbers are not known yet (the live view, before the history)
        return f"{fmt.count(count, 'unreadable line')} skipped"
    where = ", ".join(map(str, at)) + (", ..." if count > len(at) else "")
    return (f"{fmt.count(count, 'unreadable line')} skipped "
            f"(line{'' if count == 1 else 's'} {where})")
