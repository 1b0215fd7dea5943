"""Which rank holds the job: from every rank's heartbeat (runlog/heartbeats.py), the rank or
ranks the others wait for, where each of them is, and where the others wait.

A rank that will never come (its process ended, its heartbeat went stale, it never wrote
one) holds the job; else the ranks that got least far (``Beat.position``: a rank stuck before
step 30 holds the ranks already in step 30's collective). When every rank is at the same
place, none is behind: the collective itself does not complete (a network or device fault,
or a rank the launcher does not know). Ranks of a host none of whose ranks wrote a heartbeat
are "not seen" rather than blamed: the run directory may not be shared with that host.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..basics.rank_set import rank_list_text, rank_set
from ..decisions.replays import place_text
from ..job_schema import JobHang
from ..runlog.heartbeats import ENDED, Beat, clock_text, phase_text

Places = Mapping[int, tuple[str | None, int | None]]

# What a holder is
STUCK, EXITED, SILENT, ABSENT = "stuck", "exited", "silent", "absent"
SHOWN = 16              # holders described one by one in the record; the rest counted

# Fields of a holder and of a group of waiting ranks in the ``hang`` record
RANK, RANKS, COUNT, HOST, DEVICE = "rank", "ranks", "count", "host", "device"
STATE, PHASE, STEP, WHERE, SEEN, REPORT, TEXT = (
    "state", "phase", "step", "where", "seen", "report", "text")


def holder_text(state: str, beat: Beat | None, now: float) -> str:
    if beat is None:
        return "no heartbeat: it never reached mindwatch (stuck or failed before its " \
               "monitor was made)"
    if state == EXITED:
        return f"its process ended ({beat.reason or 'no reason'}) " + \
            phase_text(beat, holder=None)
    if state == SILENT:
        return (f"no heartbeat for {now - beat.time:.0f} s: its process died or its host "
                f"cannot be reached; last seen {phase_text(beat, holder=None)} at "
                f"{clock_text(beat.time)}")
    return phase_text(beat, holder=True) + (f": {beat.where}" if beat.where else "")


def answer(beats: Mapping[int, Beat], world_size: int, *, now: float, step: int,
           places: Places | None = None, gone: Mapping[int, bool] | None = None
           ) -> dict[str, Any]:
    """The ``hang`` record's fields (job_schema.JobHang) for a stall noticed at ``now``
    (Unix s) after ``step``. ``gone``: rank -> its process is known dead (a local pid
    check), beside what the heartbeats say."""
    places = places or {}
    gone = gone or {}
    seen_hosts = {b.host for b in beats.values()} | {places.get(r, (None,))[0] for r in beats}
    unseen = [r for r in range(world_size) if r not in beats and places.get(r) is not None
              and places[r][0] not in seen_hosts]
    states: dict[int, str] = {}
    for rank in range(world_size):
        beat = beats.get(rank)
        if rank in unseen:
            continue
        if beat is None:
            states[rank] = ABSENT
        elif beat.state == ENDED:
            states[rank] = EXITED
        elif gone.get(rank) or beat.stale(now):
            states[rank] = SILENT
    holders = sorted(states)
    if not holders:
        live = {r: b for r, b in beats.items() if r not in states}
        least = min((b.position() for b in live.values()), default=None)
        if least is not None and any(b.position() != least for b in live.values()):
            holders = sorted(r for r, b in live.items() if b.position() == least)
            states.update({r: STUCK for r in holders})
    waiting = _groups({r: b for r, b in beats.items() if r not in states})
    fields: dict[str, Any] = {
        JobHang.STEP: step, JobHang.WAITING_FOR: rank_set(holders),
        JobHang.HOLDER_COUNT: len(holders),
        JobHang.HOLDERS: [_holder(r, states[r], beats.get(r), places, now)
                          for r in holders[:SHOWN]],
        JobHang.WAITING: waiting, JobHang.UNSEEN: rank_set(unseen) if unseen else None}
    fields[JobHang.MESSAGE] = _message(fields, holders, waiting, unseen, beats)
    return fields


def _holder(rank: int, state: str, beat: Beat | None, places: Places,
            now: float) -> dict[str, Any]:
    # the ranks' exchange knows whether a rank has a device (not on a CPU); a heartbeat
    # knows the ranks that never reached it
    own = (beat.host, beat.device) if beat is not None else (None, None)
    host, device = places.get(rank, own)
    return {RANK: rank, HOST: host, DEVICE: device, STATE: state,
            PHASE: beat.phase if beat else None, STEP: beat.step if beat else None,
            WHERE: beat.where if beat else None, SEEN: beat.time if beat else None,
            REPORT: beat.report if beat else None, TEXT: holder_text(state, beat, now)}


def _groups(beats: Mapping[int, Beat]) -> list[dict[str, Any]]:
    """The waiting ranks grouped by where they wait, the largest group first."""
    grouped: dict[str, list[int]] = {}
    for rank, beat in beats.items():
        grouped.setdefault(phase_text(beat), []).append(rank)
    return [{RANKS: rank_set(ranks), COUNT: len(ranks), TEXT: text}
            for text, ranks in sorted(grouped.items(), key=lambda item: -len(item[1]))]


def _message(fields: Mapping[str, Any], holders: list[int], waiting: list[dict[str, Any]],
             unseen: list[int], beats: Mapping[int, Beat]) -> str:
    shown = fields[JobHang.HOLDERS]
    if holders:
        first = shown[0]
        where = f" ({place_text(first[HOST], first[DEVICE])})" if first[HOST] else ""
        said = (f"the job waits for rank {first[RANK]}{where}: {first[TEXT]}"
                if len(holders) == 1 else
                f"the job waits for {len(holders)} ranks ({rank_list_text(holders)}); "
                f"rank {first[RANK]}{where}: {first[TEXT]}")
    elif beats:
        said = ("no rank is behind: every rank that can be seen is at the same place, so "
                "a collective does not complete (a network or device fault, or a rank its "
                "launcher lost)")
    else:
        said = "no rank's heartbeat can be read, so the rank that holds the job is not known"
    others = "; ".join(f"{g[COUNT]} {'rank' if g[COUNT] == 1 else 'ranks'} ({g[RANKS]}) "
                       f"{'waits' if g[COUNT] == 1 else 'wait'} {g[TEXT]}" for g in waiting[:3])
    if others:
        said += f"; {others}"
    if unseen:
        said += (f"; ranks {rank_set(unseen)} not seen (no heartbeat from their hosts: the "
                 "run directory is not shared with them, or they never started)")
    return said
