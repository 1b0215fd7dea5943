"""``mindwatch summary``: a short verdict of a run, as text or JSON."""
from __future__ import annotations

import math
import statistics
from typing import Any, Dict, List, Optional

from .. import format as fmt
from ..runlog import RunLog

HEALTHY, ANOMALIES = 0, 1


def summarize(run: RunLog) -> Dict[str, Any]:
    ranks: List[Dict[str, Any]] = []
    for log in run.ranks:
        steps = log.steps
        losses = [s["loss"] for s in steps if s.get("loss") is not None
                  and math.isfinite(s["loss"])]
        end = log.end
        ranks.append({
            "rank": log.rank,
            "steps": steps[-1]["step"] if steps else 0,
            "first_loss": losses[0] if losses else None,
            "last_loss_smooth": steps[-1].get("loss_smooth") if steps else None,
            "skipped_steps": sum(1 for s in steps if s.get("skipped")),
            "end": end.get("reason") if end else "running or crashed (no end record)",
            "elapsed_s": end.get("elapsed_s") if end else None,
            "torn_last_line": log.torn_tail,
            "anomalies": [{"anomaly": a["anomaly"], "step": a.get("step"),
                           "actions": a.get("actions"), "message": a.get("message")}
                          for a in log.anomalies],
        })
    anomalies = sum(len(r["anomalies"]) for r in ranks)
    spread = _spread(run) if len(run.ranks) > 1 else None
    errored = any(r["end"] == "error" for r in ranks)
    healthy = anomalies == 0 and not errored
    return {"directory": run.directory, "healthy": healthy, "anomalies": anomalies,
            "ranks": ranks, "spread": spread, "exit_code": HEALTHY if healthy else ANOMALIES}


def _min_median_max(values: List[float]) -> Dict[str, float]:
    return {"min": min(values), "median": statistics.median(values), "max": max(values)}


def _spread(run: RunLog) -> Optional[Dict[str, Any]]:
    """Across ranks: the loss at the last step all ranks logged, and each rank's median step
    time (a straggler shows as a wide step-time spread only without data parallelism; with
    it, see the ``straggler`` anomalies)."""
    by_rank = [{s["step"]: s for s in log.steps} for log in run.ranks]
    common = set.intersection(*(set(steps) for steps in by_rank))
    if not common:
        return None
    last = max(common)
    losses = [steps[last]["loss"] for steps in by_rank]
    times = [statistics.median(t) for t in ([s["step_time_s"] for s in steps.values()
                                             if s.get("step_time_s") is not None]
                                            for steps in by_rank) if t]
    finite = [v for v in losses if v is not None and math.isfinite(v)]
    return {"step": last, "loss": _min_median_max(finite) if finite else None,
            "step_time_s": _min_median_max(times) if times else None}


def render_text(summary: Dict[str, Any]) -> str:
    verdict = "HEALTHY" if summary["healthy"] else (
        f"{summary['anomalies']} ANOMALIES" if summary["anomalies"] else "FAILED")
    lines = [f"{summary['directory']}: {verdict}"]
    for rank in summary["ranks"]:
        lines.append(
            f"  rank {rank['rank']}: {rank['steps']} steps, {rank['end']}"
            f" in {fmt.duration(rank['elapsed_s'])}; loss {fmt.number(rank['first_loss'])} -> "
            f"{fmt.number(rank['last_loss_smooth'])} (smoothed)"
            + (f"; {rank['skipped_steps']} updates withheld" if rank["skipped_steps"] else ""))
        for anomaly in rank["anomalies"]:
            lines.append(f"    step {anomaly['step']}: {anomaly['anomaly']} "
                         f"[{', '.join(anomaly['actions'] or [])}] {anomaly['message']}")
    spread = summary.get("spread")
    if spread:
        parts = [f"across {len(summary['ranks'])} ranks"]
        if spread["loss"]:
            loss = spread["loss"]
            parts.append(f"loss at step {spread['step']} min/median/max "
                         f"{fmt.number(loss['min'])}/{fmt.number(loss['median'])}/"
                         f"{fmt.number(loss['max'])}")
        if spread["step_time_s"]:
            time = spread["step_time_s"]
            parts.append(f"median step time min/median/max {fmt.duration(time['min'])}/"
                         f"{fmt.duration(time['median'])}/{fmt.duration(time['max'])}")
        lines.append("  " + "; ".join(parts))
    return "\n".join(lines)
