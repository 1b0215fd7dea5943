"""The text of a job's summary (summary.py): at most ``MAX_LINES`` lines, whatever the
number of ranks, and no line that lists every rank's value.

    runs/job: 1 ANOMALY
      16 ranks on 2 hosts (job.jsonl): steps 1-20, stopped; loss 1.998 -> 1.818 (mean over ranks)
      loss_nonfinite at step 20 on rank 13 (host node-b, device 5) [stop on all 16 ranks]
      silent: rank 6 (host node-a): no record since start-up
      ranks that stand out, by host:
        node-b: rank 15 the slowest (largest step time at 20 of 20 steps, ...)
      goodput 64.3% of 209.5 ms: lost 40.0 ms to stragglers, 34.7 ms to after the last step

Lines: the verdict; the job (ranks, hosts, source, steps, ending, loss); one per event
(``SHOWN_EVENTS`` at most: the first and the latest, the ones between counted in a line);
the hangs; the silent ranks (``SHOWN_SILENT`` groups, each the ranks of one reason); the
ranks that stand out, one line per host; the goodput.
"""
from __future__ import annotations

from typing import Any

from ...basics import format as fmt
from ...basics.rank_set import rank_list_text, ranks_in
from ...job_schema import JobHang
from ...records import Common
from ...runlog.goodput import goodput_text
from ..summary import GOODPUT, hang_text, skipped_note
from .hangs import SHOWN_HANGS
from .standouts import by_host
from .summary import JOB, place_of

SHOWN_EVENTS = 8            # lines of events, the line that counts the others included
FIRST_EVENTS = 3            # of which the first events; the rest the latest
SHOWN_SILENT = 3            # groups of silent ranks named; the others counted


def render_job_text(summary: dict[str, Any]) -> str:
    job = summary[JOB]
    lines = [f"{summary['directory']}: {summary['verdict']}" + _segments(summary)]
    lines.append("  " + _job_line(job, summary))
    lines += ["  " + line for line in _event_lines(job["events"])]
    hung = _hung(job["hangs"])
    if hung:
        lines.append("  hung: " + hung)
    if job["silent"]:
        lines.append("  silent: " + _silent(job["silent"]))
    hosts = by_host(job["standouts"], {s["rank"]: (s.get("host"), None)
                                       for s in job["standouts"]})
    if hosts:
        lines.append("  ranks that stand out, by host:")
        lines += [f"    {host}: " + "; ".join(f"rank {rank} " + ", ".join(texts)
                                             for rank, texts in ranks)
                  for host, ranks in hosts]
    if job.get(GOODPUT):
        lines.append("  " + goodput_text(job[GOODPUT]))
    return "\n".join(lines)


def _segments(summary: dict[str, Any]) -> str:
    if summary["segments"] < 2:
        return ""
    earlier = summary["earlier_anomalies"]
    return (f" (the latest of {summary['segments']} segments"
            + (f"; {fmt.count(earlier, 'anomaly', 'anomalies')} in earlier ones"
               if earlier else "") + ")")


def _job_line(job: dict[str, Any], summary: dict[str, Any]) -> str:
    """"16 ranks on 2 hosts (job.jsonl): steps 1-20, stopped; loss 2 -> 1.8 (mean over
    ranks)"."""
    steps = job["steps"]
    where = ("no steps" if not steps["count"] else f"step {steps['first']}"
             if steps["first"] == steps["last"] else f"steps {steps['first']}-{steps['last']}")
    loss = job["loss"]
    text = (f"{fmt.count(job['world_size'], 'rank')} on {fmt.count(job['hosts'], 'host')} "
            f"({job['source']}): {where}, {job['end'] or 'no end record'}")
    if loss["first"] is not None:
        text += (f"; loss {fmt.number(loss['first'])} -> {fmt.number(loss['latest'])} "
                 "(mean over ranks" + ("" if loss["latest"] == loss["last"] else
                                       f"; last finite {fmt.number(loss['last'])}") + ")")
    skipped = summary.get("skipped_lines") or 0
    if skipped:
        text += f"; {skipped_note(skipped, [])}"
    return text


def _event_lines(events: list[dict[str, Any]]) -> list[str]:
    if len(events) <= SHOWN_EVENTS:
        return [event["line"] for event in events]
    latest = SHOWN_EVENTS - FIRST_EVENTS - 1
    between = events[FIRST_EVENTS:-latest]
    steps = [e.get("step") for e in between]
    return ([event["line"] for event in events[:FIRST_EVENTS]]
            + [f"... and {fmt.count(len(between), 'more event')} (steps {steps[0]}-"
               f"{steps[-1]}; summary --json lists every one)"]
            + [event["line"] for event in events[-latest:]])


def _hung(hangs: list[dict[str, Any]]) -> str:
    """The latest segment's hangs: a job log's, the ranks the job waited for; the rank
    logs', the first few ranks with where each waited (as a single rank's summary)."""
    parts = []
    for hang in hangs:
        shown = hang.get("records") or []
        if hang.get(JobHang.HOLDER_COUNT) is not None and hang.get(JobHang.MESSAGE):
            # answered from every rank's heartbeat: whom the job waits for, and the others
            step = hang.get(JobHang.STEP)
            parts.append((f"after step {step}" if step else "before the first step")
                         + f": {hang[JobHang.MESSAGE]}")
        elif shown:
            told = "; ".join(hang_text(record) for record in shown[:SHOWN_HANGS])
            count = hang.get("ranks", "")
            parts.append(told + (f"; and the other ranks of {count}" if
                                 len(ranks_in(count)) > len(shown[:SHOWN_HANGS]) else "")
                         + (f" ({hang['searched']})" if hang.get("searched") else ""))
        else:
            waiting = ranks_in(hang.get("waiting_for"))
            parts.append(f"after step {hang.get('step')}"
                         + (f", waiting for rank{'s' if len(waiting) > 1 else ''} "
                            f"{rank_list_text(waiting)}" if waiting else "")
                         + (f": {hang.get('message')}" if hang.get("message") else ""))
    return "; ".join(parts)


def _silent(silent: list[dict[str, Any]]) -> str:
    """"rank 6 (host node-a): no record since start-up; ranks 9-11 (3 ranks): last seen
    at step 41, 12:03:05", the ranks of one reason together."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for entry in silent:
        groups.setdefault(entry["why"], []).append(entry)
    parts = []
    for why, entries in list(groups.items())[:SHOWN_SILENT]:
        if len(entries) == 1:
            heard = entries[0].get("heard")
            parts.append(f"{place_of(entries[0][Common.RANK], entries[0]['host'])}: {why}"
                         + (f"; {heard}" if heard else ""))
        else:
            ranks = [e[Common.RANK] for e in entries]
            parts.append(f"ranks {rank_list_text(ranks, 40)} ({len(ranks)} ranks): {why}")
    rest = sum(len(entries) for entries in list(groups.values())[SHOWN_SILENT:])
    return "; ".join(parts) + (f"; and {fmt.count(rest, 'other rank')}" if rest else "")
