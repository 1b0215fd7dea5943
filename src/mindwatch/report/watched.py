"""No run is called HEALTHY that mindwatch could not watch.

A run segment was not watched when the monitor said so (a ``notice`` with ``unwatched``, the
fix in one sentence: written at the first step when neither a loss nor a gradient norm
reached it, or the optimizer was never protected), or when none of its step records holds a
loss or a gradient norm (an older log, or a writer that never passed them): its anomaly
rules then had nothing to judge, and no anomaly means nothing. The views that give a verdict
(``mindwatch summary``, the HTML report, ``mindwatch watch``) say NOT WATCHED with the fix
instead of HEALTHY. A segment without a step record is left to its ending to judge.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence

from ..runlog.scan import RankScan
from ..runlog.segments import Segment

NOT_WATCHED = "NOT WATCHED"
# The fix when no notice names one: the step records themselves show nothing was watched.
NO_VALUES = ("no step record holds a loss or a gradient norm, so nothing was judged: pass "
             "each step's loss (and grad_norm) to observe")


def unwatched_fixes(fixes: Sequence[str], steps: int, measured: bool) -> list[str]:
    """What keeps a segment from being watched, each fix once (empty: it was watched):
    the notices' ``fixes``; else, when its ``steps`` step records held no value
    (``measured`` false), ``NO_VALUES``."""
    named = list(dict.fromkeys(fixes))
    if named:
        return named
    return [NO_VALUES] if steps and not measured else []


def segment_fixes(segment: Segment) -> list[str]:
    return unwatched_fixes(segment.unwatched, segment.step_count, segment.measured)


def not_watched(by_rank: Mapping[int, Sequence[str]], ranks: int) -> str | None:
    """"NOT WATCHED: <fix>" for a verdict, "NOT WATCHED ON RANK 1: ..." when not every one of
    the ``ranks`` ranks is concerned; None when every rank was watched. ``by_rank``: each
    rank's fixes (``unwatched_fixes``)."""
    concerned = sorted(rank for rank, fixes in by_rank.items() if fixes)
    if not concerned:
        return None
    where = "" if len(concerned) == ranks else \
        f" ON RANK{'S' if len(concerned) > 1 else ''} {', '.join(map(str, concerned))}"
    fixes = dict.fromkeys(fix for rank in concerned for fix in by_rank[rank])
    return f"{NOT_WATCHED}{where}: {'; '.join(fixes)}"


def run_not_watched(scans: Sequence[tuple[int, RankScan]]) -> str | None:
    """``not_watched`` of a run's ranks, ``(rank, scan)`` each, by their latest segment."""
    return not_watched({rank: segment_fixes(scan.segments[-1]) for rank, scan in scans
                        if scan.segments}, len(scans))
