"""``mindwatch summary``: a short verdict of a run, as text or JSON."""
from __future__ import annotations

import math
from typing import Any, Dict, List

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
    errored = any(r["end"] == "error" for r in ranks)
    healthy = anomalies == 0 and not errored
    return {"directory": run.directory, "healthy": healthy, "anomalies": anomalies,
            "ranks": ranks, "exit_code": HEALTHY if healthy else ANOMALIES}


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
    return "\n".join(lines)
