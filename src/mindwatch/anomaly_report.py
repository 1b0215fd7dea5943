"""The anomaly report: ``anomalies/step<N>_rank<R>.json`` for tools, ``.md`` for people."""
from __future__ import annotations

import json
import os
from typing import Any, Dict, List, Mapping, Optional

from . import format as fmt
from . import records
from .anomaly import Anomaly
from .run_dir import anomaly_report_stem, write_text_atomically

HISTORY_STEPS = 50


def write_report(*, log_dir: str, rank: int, anomaly: Anomaly, history: List[Mapping[str, Any]],
                 hardware: Optional[Mapping[str, Any]], notes: List[str],
                 resume_snippet: Optional[str], top_layers: Optional[List[list]] = None) -> str:
    """Write both files; returns the JSON path. ``history`` is the last step records."""
    stem = anomaly_report_stem(log_dir, anomaly.step or 0, rank)
    os.makedirs(os.path.dirname(stem), exist_ok=True)
    steps = [dict(step=r.get("step"), loss=r.get("loss"), loss_smooth=r.get("loss_smooth"),
                  grad_norm=r.get("grad_norm"), lr=r.get("lr"), skipped=r.get("skipped"))
             for r in history[-HISTORY_STEPS:]]
    body: Dict[str, Any] = {
        "anomaly": anomaly.kind, "step": anomaly.step, "rank": rank, "value": anomaly.value,
        "threshold": anomaly.threshold, "message": anomaly.message, "actions": anomaly.actions,
        "checkpoint": anomaly.checkpoint, "notes": notes, "resume": resume_snippet,
        "hardware": hardware, "top_layers": top_layers, "history": steps,
    }
    json_path = stem + ".json"
    write_text_atomically(json_path, records.encode(body) + "\n")
    write_text_atomically(stem + ".md", _markdown(body))
    return json_path


def _markdown(body: Mapping[str, Any]) -> str:
    lines = [
        f"# Anomaly: {body['anomaly']} at step {body['step']} (rank {body['rank']})", "",
        body["message"], "",
        f"- value: {fmt.number(body['value'])}",
        f"- threshold: {fmt.number(body['threshold'])}",
        f"- actions taken: {', '.join(body['actions']) or 'none'}",
        f"- checkpoint: {body['checkpoint'] or 'none written'}",
    ]
    lines += [f"- {note}" for note in body["notes"]]
    if body["top_layers"]:
        lines += ["", "## Layers with the largest gradient norm at this step", "",
                  "| layer | gradient L2 norm |", "|---|---:|"]
        lines += [f"| {name} | {fmt.number(norm)} |" for name, norm in body["top_layers"]]
    if body["resume"]:
        lines += ["", "## Resume from the checkpoint", "", "```python", body["resume"], "```"]
    hardware = body["hardware"]
    if hardware:
        lines += ["", "## Latest hardware sample", "", "```json",
                  json.dumps(records.to_strict(dict(hardware)), indent=2), "```"]
    lines += ["", f"## Last {len(body['history'])} steps", "",
              "| step | loss | loss (smoothed) | grad norm | lr | skipped |",
              "|---:|---:|---:|---:|---:|:---:|"]
    for row in body["history"]:
        lines.append(f"| {row['step']} | {fmt.number(row['loss'])} | "
                     f"{fmt.number(row['loss_smooth'])} | {fmt.number(row['grad_norm'])} | "
                     f"{fmt.lr(row['lr'])} | {'yes' if row['skipped'] else ''} |")
    return "\n".join(lines) + "\n"
