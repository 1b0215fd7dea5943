"""Each rank's heartbeat: ``<log_dir>/heartbeats/rank_<R>.json``, one small JSON object that
the rank's heartbeat thread replaces every few seconds (background/heartbeat.py). It says
where the rank is (its phase and step, since when, the training thread's innermost frames)
and that its process is alive; when its hang watchdog fires, at once, with ``state``
"stalled" and its hang report. The job's answer to a hang (job/holders.py) and the views read
them; a rank killed outright leaves its last one, which goes stale.

This module is the format and its reader; it needs no framework. A file that cannot be read
or decoded is skipped (the writer replaces it atomically, so that is a disk fault, not a race).
"""
from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass

DIRECTORY = "heartbeats"
ANSWER_FILE = "hang_answer.json"       # the job's answer to the latest hang (job/holders.py)

# Fields of a heartbeat
RANK, HOST, DEVICE, PID = "rank", "host", "device", "pid"
TIME = "time"                  # Unix s: when it was written
INTERVAL_S = "interval_s"      # its writer's period: how old it may be while the rank lives
PHASE, STEP, SINCE = "phase", "step", "since"     # where the rank is, since (Unix s)
WHERE = "where"                # the training thread's innermost frames (decisions/hang_report)
DATA_LOADER = "data_loader"    # the training thread waits in a data loader's frames
STATE = "state"                # RUNNING, STALLED or ENDED
REASON = "reason"              # ENDED: the end record's reason ("completed", "signal", ...)
REPORT = "report"              # STALLED: its hang report (JSON path)

# Phases, in the order a step goes through them (``position``)
STARTING = "starting"                  # before the ranks' start-up exchange
STARTUP_EXCHANGE = "startup_exchange"  # in it: every rank's host and device
BEFORE_STEP = "before_step"            # ``step`` is the coming one: data loader, other work
IN_STEP = "in_step"                    # the step's computation and its collectives
EXCHANGE = "exchange"                  # mindwatch's exchange after ``step``
EVALUATING = "evaluating"              # between steps, ``step`` the last one
PHASES = (STARTING, STARTUP_EXCHANGE, BEFORE_STEP, IN_STEP, EXCHANGE, EVALUATING)
RUNNING, STALLED, ENDED = "running", "stalled", "ended"

# A heartbeat older than this many of its periods (plus a margin for a loaded file system)
# is a rank whose process died or whose host cannot be reached.
STALE_PERIODS, STALE_MARGIN_S = 3.0, 2.0


@dataclass(frozen=True, kw_only=True)
class Beat:
    rank: int
    host: str | None
    device: int | None
    pid: int | None
    time: float
    interval_s: float
    phase: str
    step: int
    since: float
    where: str | None = None
    data_loader: bool = False
    state: str = RUNNING
    reason: str | None = None
    report: str | None = None

    def stale(self, now: float) -> bool:
        """No newer heartbeat is due by ``now`` (Unix s) from a live rank."""
        return self.state != ENDED and \
            now - self.time > STALE_PERIODS * self.interval_s + STALE_MARGIN_S

    def position(self) -> float:
        """How far the rank got: later phases and steps are larger. A rank that waits for
        another in a collective is further than the one it waits for."""
        if self.phase == STARTING:
            return -2.0
        if self.phase == STARTUP_EXCHANGE:
            return -1.0
        if self.phase == EVALUATING:            # after ``step``'s exchange, before the next
            return 3.0 * (self.step + 1) - 0.5
        offset = {BEFORE_STEP: 0.0, IN_STEP: 1.0, EXCHANGE: 2.0}.get(self.phase, 0.0)
        return 3.0 * self.step + offset


def clock_text(at: float) -> str:
    return time.strftime("%H:%M:%S", time.localtime(at))


def phase_text(beat: Beat, *, holder: bool | None = False) -> str:
    """Where ``beat``'s rank is, in words: "in its data loader before step 30". A holder in
    a step is in its computation; the others there wait in the step's collectives; of a rank
    that is gone (``holder`` None) that is not known."""
    step = beat.step
    if beat.phase == STARTING:
        return "never started: still in its start-up"
    if beat.phase == STARTUP_EXCHANGE:
        return "in the ranks' start-up exchange"
    if beat.phase == BEFORE_STEP:
        return (f"in its data loader before step {step}" if beat.data_loader
                else f"in its own code before step {step}")
    if beat.phase == IN_STEP:
        return f"in step {step}" + ("" if holder is None else " (its computation)" if holder
                                    else " (the step's collectives)")
    if beat.phase == EXCHANGE:
        return f"in mindwatch's exchange after step {step}"
    if beat.phase == EVALUATING:
        return f"evaluating after step {step}"
    return f"{beat.phase} at step {step}"


def last_heard(beat: Beat) -> str:
    """"last heartbeat 12:03:05, in its data loader before step 30: <where>", for a rank a
    view names as silent."""
    if beat.state == ENDED:
        return f"last heartbeat {clock_text(beat.time)}: its monitor closed ({beat.reason})"
    return (f"last heartbeat {clock_text(beat.time)}, {phase_text(beat, holder=None)}"
            + (f": {beat.where}" if beat.where else ""))


def directory(log_dir: str) -> str:
    return os.path.join(log_dir, DIRECTORY)


def beat_path(log_dir: str, rank: int) -> str:
    return os.path.join(directory(log_dir), f"rank_{rank}.json")


def answer_path(log_dir: str) -> str:
    return os.path.join(directory(log_dir), ANSWER_FILE)


def decode(data: dict) -> Beat | None:
    """A heartbeat from its JSON object; None when a field is missing or of the wrong type."""
    try:
        return Beat(
            rank=int(data[RANK]), host=data.get(HOST), device=data.get(DEVICE),
            pid=data.get(PID), time=float(data[TIME]), interval_s=float(data[INTERVAL_S]),
            phase=str(data[PHASE]), step=int(data[STEP]), since=float(data[SINCE]),
            where=data.get(WHERE), data_loader=bool(data.get(DATA_LOADER)),
            state=str(data.get(STATE, RUNNING)), reason=data.get(REASON),
            report=data.get(REPORT))
    except (KeyError, TypeError, ValueError):
        return None


def read_beat(path: str) -> Beat | None:
    try:
        with open(path, encoding="utf-8") as handle:
            data = json.load(handle)
    except (OSError, ValueError):
        return None
    return decode(data) if isinstance(data, dict) else None


def read_beats(log_dir: str) -> dict[int, Beat]:
    """Rank -> its heartbeat, for every readable ``rank_<R>.json`` of the run directory."""
    found: dict[int, Beat] = {}
    try:
        names = os.listdir(directory(log_dir))
    except OSError:
        return found
    for name in names:
        number = name[len("rank_"):-len(".json")]
        if not (name.startswith("rank_") and name.endswith(".json") and number.isdigit()):
            continue
        rank = int(number)
        beat = read_beat(os.path.join(directory(log_dir), name))
        if beat is not None and beat.rank == rank:
            found[rank] = beat
    return found


def read_answer(log_dir: str) -> dict | None:
    """The job's latest answer to a hang, as its ``hang`` record holds it; None: none."""
    try:
        with open(answer_path(log_dir), encoding="utf-8") as handle:
            data = json.load(handle)
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None
