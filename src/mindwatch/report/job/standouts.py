"""The ranks of a job that stand out (``mindwatch summary`` of several ranks), from the job
view's spreads: never a value per rank, whatever the number of ranks.

- the slowest: the rank that most often had the step's largest step time (``max_rank`` of
  ``step_time_s``), counted over the steps whose largest is above their median (where all
  are equal, no rank is slower);
- the most data time: the rank whose logged data times sum the highest when the view has
  each rank's sum (the rank logs', or the bins'), else the one most often the step's
  largest (``data_time_s``);
- the largest memory: the rank most often the step's largest ``memory_mb``;
- stragglers: the ranks the job's ``straggler`` events came from.

A rank counts as standing out when it is the largest at a tenth of the steps or more (two at
least, and twice what chance gives one rank: all of them for two ranks), by 5% over the
steps' median or more (any margin, for the largest at every step of more than two ranks):
at random, each of thousands of ranks would lead a few steps each.
"""
from __future__ import annotations

import warnings
from collections import Counter
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ...anomaly import STRAGGLER
from ...basics import format as fmt
from ...basics.rank_set import ranks_in
from ...job_schema import Event, JobStep
from ...runlog.job.columns import SEGMENT

if TYPE_CHECKING:
    from ...runlog.job.view import JobView, SpreadColumns

SHARE = 0.1              # of the steps a rank must lead to stand out
MARGIN = 1.05            # its typical largest value over the steps' median, at least
EXCESS = 1.2             # a rank's data time sum, at least this times the ranks' median
SLOWEST, DATA, MEMORY, STRAGGLERS = "slowest", "data_time", "memory", "straggler"


def _leader(spread: SpreadColumns, world: int) -> tuple[int, int, int, float, float] | None:
    """(rank, steps it led, steps counted, its median value there, the steps' median
    value) of the rank most often the largest; None when none stands out."""
    import numpy as np

    highest, ranks, typical = spread.max, spread.max_rank, spread.median
    counted = (ranks >= 0) & np.isfinite(highest) & np.isfinite(typical)
    above = counted & (highest > typical)
    if not above.any():
        return None
    counts = np.bincount(ranks[above])
    rank = int(counts.argmax())
    led = int(counts[rank])
    total = int(counted.sum())
    # twice what chance gives a rank, and a tenth of the steps: of 2 ranks one leads
    # half of them by chance alone
    needed = total if world <= 2 else max(2, SHARE * total, 2 * total / world)
    if led < min(needed, total):
        return None
    mine = above & (ranks == rank)
    value, median = float(np.median(highest[mine])), float(np.median(typical[counted]))
    # the largest at every step of more than two ranks stands out by any margin
    if not value >= median * MARGIN and not (led == total and world > 2):
        return None
    return rank, led, total, value, median


def standouts(view: JobView) -> list[dict[str, Any]]:
    """``[{rank, what, text, ...figures}]``, in the order of the module docstring."""
    import numpy as np

    found = _led(view, JobStep.STEP_TIME_S, SLOWEST, "the slowest (largest step time",
                 fmt.duration)
    sums = view.data_time_s
    if sums is not None and np.isfinite(sums).any():
        entry = _data_sums(sums)
        found += [entry] if entry is not None else []
    else:
        found += _led(view, JobStep.DATA_TIME_S, DATA, "the most data time (largest",
                      fmt.duration)
    found += _led(view, JobStep.MEMORY_MB, MEMORY, "the largest memory (largest",
                  fmt.megabytes)
    found += _stragglers(view)
    return found


def _led(view: JobView, name: str, what: str, words: str, unit: Callable[[float], str]
         ) -> list[dict[str, Any]]:
    """The rank most often the largest of the spread ``name``, as a standout (none or one)."""
    leader = _leader(view.spreads[name], view.world_size)
    if leader is None:
        return []
    rank, led, total, value, typical = leader
    return [{"rank": rank, "what": what, "steps": led, "of": total, "value": value,
             "median": typical, "text": f"{words} at {_share(led, total)}, {unit(value)} "
                                        f"against a median {unit(typical)})"}]


def _share(led: int, total: int) -> str:
    return f"{led} of {total} steps" if led == total or total < 100 else \
        f"{led / total:.0%} of {total} steps"


def _data_sums(sums: Any) -> dict[str, Any] | None:
    """The rank whose data times (``sums``, per rank, s; NaN: unknown) sum the highest;
    None when it does not stand out."""
    import numpy as np

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        rank = int(np.nanargmax(sums))
        typical = float(np.nanmedian(sums))
    value = float(sums[rank])
    if not value > typical * EXCESS or np.isfinite(sums).sum() < 2:
        return None
    return {"rank": rank, "what": DATA, "value": value, "median": typical,
            "text": f"the most data time ({fmt.duration(value)} in all against a median "
                    f"{fmt.duration(typical)})"}


def _stragglers(view: JobView) -> list[dict[str, Any]]:
    """The ranks the latest segment's straggler events came from (their origin, else their
    ranks), each with its count of events."""
    counts: Counter[int] = Counter()
    for event in view.events:
        if STRAGGLER not in (event.get(Event.KINDS) or ()) or \
                event.get(SEGMENT, view.segments) != view.segments:
            continue
        origin = event.get(Event.ORIGIN_RANK)
        if isinstance(origin, int):
            counts[origin] += 1
            continue
        counts.update(ranks_in(event.get(Event.RANKS)))
    return [{"rank": rank, "what": STRAGGLERS, "events": count,
             "text": f"a straggler ({fmt.count(count, 'event')})"}
            for rank, count in counts.most_common(3)]


def by_host(found: list[dict[str, Any]], places: dict[int, tuple[str | None, int | None]]
            ) -> list[tuple[str, list[tuple[int, list[str]]]]]:
    """The standouts grouped by host (in order of first mention), then by rank: ``[(host,
    [(rank, [text, ...])])]``; a rank whose host is unknown under "host unknown"."""
    hosts: dict[str, dict[int, list[str]]] = {}
    for entry in found:
        host = places.get(entry["rank"], (None, None))[0] or "host unknown"
        hosts.setdefault(host, {}).setdefault(entry["rank"], []).append(entry["text"])
    return [(host, list(ranks.items())) for host, ranks in hosts.items()]
