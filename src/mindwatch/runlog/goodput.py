"""A run's goodput: the share of its wall-clock time that trained the model, and the time lost
by cause (docs/log-format.md#goodput-where-the-time-went), from the rank logs alone.

Wall-clock time runs from the first `run` record (the earliest over ranks) to the latest
record of any rank. Each rank's time is cut into its step records' intervals (from the
previous step's end, or the segment's `run` record, to this step's end) and what lies
around them; the steady cost of a step is its segment's median ``step_time_s``. An
interval's part up to the steady cost (times the steps it covers) is training, unless its
step was withheld or later rewound; what lies beyond is lost, to a cause when the log says
which (the segment's first step: start-up and compilation; after a hang or a replay: that),
else to pauses (checkpoint saves, evaluations) when the interval is more than
``PAUSE_FACTOR`` times the steady cost. Beyond the steady cost but under that factor is a
slow step, not a lost one: counting every step's jitter above the median would call a
steady run's noise lost time.

The run's figure for a cause is the median over ranks of each rank's (synchronous ranks
lose the same time together); stragglers are the data time the slowest rank logged beyond
the ranks' lower median, the time the others waited for it.
"""
from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from operator import sub
from typing import Any

from ..basics import format as fmt
from ..records import Step
from .scan import RankScan
from .step_times import SegmentTimes, StepTimes

# Causes, in the order of the JSON object; the text names the largest first.
RESTART, STARTUP, PAUSE, WITHHELD = "restart", "startup", "pause", "withheld"
REPLAY, REWIND, HANG, STRAGGLER, SHUTDOWN = "replay", "rewind", "hang", "straggler", "shutdown"
CAUSES = (RESTART, STARTUP, PAUSE, WITHHELD, REPLAY, REWIND, HANG, STRAGGLER, SHUTDOWN)
LABELS = {RESTART: "restarts", STARTUP: "start-up and compilation",
          PAUSE: "pauses (checkpoint saves, evaluations)", WITHHELD: "withheld steps",
          REPLAY: "replays", REWIND: "rewound steps", HANG: "hangs", STRAGGLER: "stragglers",
          SHUTDOWN: "after the last step"}
# An interval more than this many times its steady cost is a pause (saves, evaluations);
# one under it is a slow step, counted as training (module docstring).
PAUSE_FACTOR = 2.0
SHARE, WALL_S, PRODUCTIVE_S, LOST_S = "share", "wall_s", "productive_s", "lost_s"
_DIGITS = 6             # seconds to the microsecond: Unix times differ in their last bits


@dataclass
class RankTime:
    started: float | None = None          # its first `run` record's time
    last: float | None = None             # its latest record's time
    lost: dict[str, float] = field(default_factory=lambda: dict.fromkeys(CAUSES, 0.0))
    data_time_s: float | None = None      # the sum of its logged data times; None: none


def rank_time(scan: RankScan) -> RankTime:
    """Where one rank's time went."""
    times, found = scan.times, RankTime()
    segments = times.segments
    numbers, step_times = scan.steps[Step.STEP], scan.steps[Step.STEP_TIME_S]
    for index, segment in enumerate(segments):
        following = segments[index + 1] if index + 1 < len(segments) else None
        stop = following.start if following else len(times.ends)
        # one segment of ascending steps: the scan's median step time is the segment's
        known = scan.step_time_median if len(segments) == 1 and scan.ascending else None
        tail_from = _segment(segment, range(segment.start, stop), times, numbers, step_times,
                             found.lost, final=following is None, known=known)
        if found.started is None:   # without a `run` record (in memory): its first step
            found.started = segment.started if segment.started is not None else \
                (times.ends[segment.start] if stop > segment.start else None)
        if following is not None and following.started is not None:
            end = segment.last if segment.last is not None else tail_from
            if end is not None:     # the restart: from this segment's end to the next start
                found.lost[RESTART] += max(0.0, following.started - end)
        if segment.last is not None:
            found.last = segment.last if found.last is None else max(found.last, segment.last)
    if times.data_times:
        found.data_time_s = times.data_time_s
    return found


def _segment(segment: SegmentTimes, indexes: range, times: StepTimes, numbers: Sequence[Any],
             step_times: Sequence[Any], lost: dict[str, float], final: bool,
             known: float | None = None) -> float | None:
    """Adds one segment's lost time to ``lost``; returns its last step's end (else its
    start), from which its tail is measured. ``known``: its median step time, when the scan
    has it. The intervals are compared in C: only those a cause may claim, the withheld and
    the rewound are looked at one by one."""
    first, stop = indexes.start, indexes.stop
    ends = times.ends[first:stop].tolist()
    previous = segment.started if segment.started is not None else (ends[0] if ends else None)
    gaps = list(map(sub, ends, [previous, *ends[:-1]])) if ends else []
    steady = (known if known is not None else _median(step_times[first:stop])) or 0.0
    covers = times.covered[first:stop].tolist()
    costs = [steady * c for c in covers] if covers.count(1) < len(covers) else None
    # the intervals a cause may claim: a pause's (in C), the first, those after a hang or a
    # replay; a slow step under PAUSE_FACTOR is none of them (the module docstring)
    pause = PAUSE_FACTOR * steady
    over = [k for k, gap in enumerate(gaps) if gap > pause] if costs is None else \
        [k for k, (gap, cost) in enumerate(zip(gaps, costs, strict=True))
         if gap > PAUSE_FACTOR * cost]
    hangs, replays = set(segment.hangs), set(segment.replays)
    if hangs - {None} or replays:
        after = {n: k + 1 for k, n in enumerate(numbers[first:stop - 1])}
        over += [after[n] for n in (hangs | replays) if n in after]
    if gaps:
        over.append(0)

    def base(k: int) -> float:      # the training part of interval k
        return max(0.0, min(gaps[k], steady if costs is None else costs[k]))

    for k in sorted(set(over)):
        cost = base(k)
        excess = gaps[k] - cost
        if excess <= 0:
            continue
        step = numbers[first + k - 1] if k else None
        if k == 0:
            cause = HANG if None in hangs else STARTUP
        elif step in hangs:
            cause = HANG
        elif step in replays:
            cause = REPLAY
        else:
            cause = PAUSE
        lost[cause] += excess
    withheld = [i - first for i in times.skipped if first <= i < stop]
    lost[WITHHELD] += sum(map(base, withheld))
    if ends:
        previous = ends[-1]
    if previous is not None and math.isfinite(previous) and segment.last is not None \
            and segment.last > previous:
        hung = numbers[stop - 1] in hangs if ends else None in hangs
        lost[HANG if hung else SHUTDOWN if final else RESTART] += segment.last - previous
    for step, to_step in segment.rewinds:
        lost[REWIND] += sum(map(base, _rewound(step, to_step, indexes, numbers,
                                               times.skipped)))
    return previous


def _rewound(step: Any, to_step: Any, indexes: range, numbers: Sequence[Any],
             skipped: set[int]) -> list[int]:
    """The intervals (from the segment's first) of the step records from ``to_step + 1`` to
    ``step`` (the latest records of those numbers before the rewind), withheld ones left out:
    counted already."""
    if not isinstance(step, int) or not isinstance(to_step, int):
        return []
    at = next((i for i in reversed(indexes) if numbers[i] == step), None)
    found = []
    while at is not None and at >= indexes.start and numbers[at] > to_step:
        if at not in skipped:
            found.append(at - indexes.start)
        at -= 1
    return found


def _median(values: Sequence[Any]) -> float | None:
    """The median of the positive finite step times (a column: floats, or None)."""
    finite = [v for v in values if v is not None and 0 < v < math.inf]
    return statistics.median(finite) if finite else None


def goodput(scans: list[RankScan]) -> dict[str, Any] | None:
    """``{share, wall_s, productive_s, lost_s: {cause: s}}`` of a run's ranks; None when its
    logs time nothing (no record with a time after the first `run` record)."""
    ranks = [rank_time(scan) for scan in scans]
    starts = [r.started for r in ranks if r.started is not None]
    lasts = [r.last for r in ranks if r.last is not None]
    if not starts or not lasts or max(lasts) <= min(starts):
        return None
    wall = max(lasts) - min(starts)
    lost = {cause: statistics.median(r.lost[cause] for r in ranks) for cause in CAUSES}
    data = [r.data_time_s for r in ranks if r.data_time_s is not None]
    if len(data) > 1:   # the lower median: of two ranks, the fast one is the one that waited
        lost[STRAGGLER] = max(data) - statistics.median_low(data)
    productive = max(0.0, wall - sum(lost.values()))
    return {SHARE: round(productive / wall, _DIGITS), WALL_S: round(wall, _DIGITS),
            PRODUCTIVE_S: round(productive, _DIGITS),
            LOST_S: {cause: round(seconds, _DIGITS) for cause, seconds in lost.items()}}


def largest(figures: dict[str, Any], named: int = 4) -> list[tuple[str, float]]:
    """The causes that lost time, largest first: ``named`` of them, then the rest summed
    as ``("other", seconds)``."""
    causes = sorted(((c, s) for c, s in figures[LOST_S].items() if s > 0),
                    key=lambda pair: -pair[1])
    if len(causes) <= named:
        return causes
    return [*causes[:named], ("other", sum(s for _, s in causes[named:]))]


def goodput_text(figures: dict[str, Any]) -> str:
    """"goodput 93.1% of 2h00m: lost 4m06s to restarts, 2m00s to start-up and compilation"."""
    head = f"goodput {figures[SHARE] * 100:.1f}% of {fmt.duration(figures[WALL_S])}"
    causes = largest(figures)
    if not causes:
        return head + ": no time lost"
    return head + ": lost " + ", ".join(
        f"{fmt.duration(seconds)} to {LABELS.get(cause, 'other causes')}"
        for cause, seconds in causes)
