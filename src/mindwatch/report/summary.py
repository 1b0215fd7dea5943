"""``mindwatch summary``: a short verdict of a run, as text or JSON."""
from __future__ import annotations

import math
import statistics
from typing import Any, Dict, List, Optional

from .. import format as fmt
from .. import records
from ..records import Anomaly, Common, End, Step
from ..runlog import RunLog
from .spread import STATS, min_median_max

HEALTHY, ANOMALIES = 0, 1
# Summary keys that are not record fields: a rank's end reason, the anomalies found.
_END, _ANOMALIES = records.END, "anomalies"
ANOMALY_FIELDS = (Anomaly.ANOMALY, Anomaly.STEP, Anomaly.ACTIONS, Anomaly.MESSAGE)


def summarize(run: RunLog) -> Dict[str, Any]:
    ranks: List[Dict[str, Any]] = []
    for log in run.ranks:
        steps = log.steps
        losses = [s[Step.LOSS] for s in steps if s.get(Step.LOSS) is not None
                  and math.isfinite(s[Step.LOSS])]
        end = log.end
        ranks.append({
            Common.RANK: log.rank,
            End.STEPS: steps[-1][Step.STEP] if steps else 0,
            "first_loss": losses[0] if losses else None,
            "last_loss_smooth": steps[-1].get(Step.LOSS_SMOOTH) if steps else None,
            "skipped_steps": sum(1 for s in steps if s.get(Step.SKIPPED)),
            _END: end.get(End.REASON) if end else "running or crashed (no end record)",
            End.ELAPSED_S: end.get(End.ELAPSED_S) if end else None,
            "torn_last_line": log.torn_tail,
            _ANOMALIES: [{name: a.get(name) for name in ANOMALY_FIELDS} for a in log.anomalies],
        })
    anomalies = sum(len(r[_ANOMALIES]) for r in ranks)
    spread = _spread(run) if len(run.ranks) > 1 else None
    errored = any(r[_END] == records.ERROR for r in ranks)
    healthy = anomalies == 0 and not errored
    return {"directory": run.directory, "healthy": healthy, _ANOMALIES: anomalies,
            "ranks": ranks, "spread": spread,
            "exit_code": HEALTHY if healthy else ANOMALIES}


def _spread(run: RunLog) -> Optional[Dict[str, Any]]:
    """Across ranks: the loss at the last step all ranks logged, and each rank's median step
    time (a straggler shows as a wide step-time spread only without data parallelism; with
    it, see the ``straggler`` anomalies)."""
    by_rank = [{s[Step.STEP]: s for s in log.steps} for log in run.ranks]
    common = set.intersection(*(set(steps) for steps in by_rank))
    if not common:
        return None
    last = max(common)
    times = [statistics.median(t) for t in ([s[Step.STEP_TIME_S] for s in steps.values()
                                             if s.get(Step.STEP_TIME_S) is not None]
                                            for steps in by_rank) if t]
    return {Step.STEP: last,
            Step.LOSS: min_median_max(steps[last].get(Step.LOSS) for steps in by_rank),
            Step.STEP_TIME_S: min_median_max(times)}


def render_text(summary: Dict[str, Any]) -> str:
    verdict = "HEALTHY" if summary["healthy"] else (
        f"{summary[_ANOMALIES]} ANOMALIES" if summary[_ANOMALIES] else "FAILED")
    lines = [f"{summary['directory']}: {verdict}"]
    for rank in summary["ranks"]:
        lines.append(
            f"  rank {rank[Common.RANK]}: {rank[End.STEPS]} steps, {rank[_END]}"
            f" in {fmt.duration(rank[End.ELAPSED_S])}; loss {fmt.number(rank['first_loss'])} -> "
            f"{fmt.number(rank['last_loss_smooth'])} (smoothed)"
            + (f"; {rank['skipped_steps']} updates withheld" if rank["skipped_steps"] else ""))
        for anomaly in rank[_ANOMALIES]:
            lines.append(f"    step {anomaly[Anomaly.STEP]}: {anomaly[Anomaly.ANOMALY]} "
                         f"[{', '.join(anomaly[Anomaly.ACTIONS] or [])}] "
                         f"{anomaly[Anomaly.MESSAGE]}")
    spread = summary.get("spread")
    if spread:
        parts = [f"across {len(summary['ranks'])} ranks"]
        if spread[Step.LOSS]:
            parts.append(f"loss at step {spread[Step.STEP]} min/median/max "
                         + "/".join(fmt.number(spread[Step.LOSS][s]) for s in STATS))
        if spread[Step.STEP_TIME_S]:
            parts.append("median step time min/median/max "
                         + "/".join(fmt.duration(spread[Step.STEP_TIME_S][s]) for s in STATS))
        lines.append("  " + "; ".join(parts))
    return "\n".join(lines)
