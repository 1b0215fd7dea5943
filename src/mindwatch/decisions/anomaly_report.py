"""The anomaly report: ``anomalies/step<N>_rank<R>.json`` for tools, ``.md`` for people."""
from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Any

from .. import records
from ..anomaly import Anomaly
from ..basics import format as fmt
from ..basics.run_dir import unused_report_stem, write_text_atomically
from ..records import Anomaly as Record
from ..records import Common, Step

HISTORY_STEPS = 50
# The step fields each history row keeps.
HISTORY_FIELDS = (Step.STEP, Step.LOSS, Step.LOSS_SMOOTH, Step.GRAD_NORM, Step.LR, Step.SKIPPED)
# The report's own fields, beside the anomaly record's.
NOTES, RESUME, HARDWARE, TOP_LAYERS, HISTORY = (
    "notes", "resume", records.HARDWARE, "top_layers", "history")


def write_report(*, log_dir: str, rank: int, anomaly: Anomaly, history: list[Mapping[str, Any]],
                 hardware: Mapping[str, Any] | None, notes: list[str],
                 resume_snippet: str | None, top_layers: list[list] | None = None) -> str:
    """Write both files, under a name no earlier report holds (``unused_report_stem``);
    returns the JSON path. ``history`` is the last step records."""
    stem = unused_report_stem(log_dir, anomaly.step or 0, rank, anomaly.kind)
    os.makedirs(os.path.dirname(stem), exist_ok=True)
    steps = [{name: r.get(name) for name in HISTORY_FIELDS} for r in history[-HISTORY_STEPS:]]
    body: dict[str, Any] = {
        Record.ANOMALY: anomaly.kind, Record.STEP: anomaly.step, Common.RANK: rank,
        Record.VALUE: anomaly.value, Record.THRESHOLD: anomaly.threshold,
        Record.MESSAGE: anomaly.message, Record.ACTIONS: anomaly.actions,
        Record.CHECKPOINT: anomaly.checkpoint, **anomaly.fields, NOTES: notes,
        RESUME: resume_snippet,
        HARDWARE: hardware, TOP_LAYERS: top_layers, HISTORY: steps,
    }
    return write_report_files(stem, body, _markdown(body))


def write_report_files(stem: str, body: Mapping[str, Any], markdown: str) -> str:
    """``<stem>.json`` (the run log's strict JSON) and ``<stem>.md``, each written atomically;
    returns the JSON file's path."""
    json_path = stem + ".json"
    write_text_atomically(json_path, records.encode(body) + "\n")
    write_text_atomically(stem + ".md", markdown)
    return json_path


def _markdown(body: Mapping[str, Any]) -> str:
    lines = [
        f"# Anomaly: {body[Record.ANOMALY]} at step {body[Record.STEP]} "
        f"(rank {body[Common.RANK]})", "",
        body[Record.MESSAGE], "",
        f"- value: {fmt.number(body[Record.VALUE])}",
        f"- threshold: {fmt.number(body[Record.THRESHOLD])}",
        f"- actions taken: {', '.join(body[Record.ACTIONS]) or 'none'}",
        f"- checkpoint: {body[Record.CHECKPOINT] or 'none written'}",
    ]
    lines += [f"- {note}" for note in body[NOTES]]
    if body[TOP_LAYERS]:
        lines += ["", "## Layers with the largest gradient norm at this step", "",
                  "| layer | gradient L2 norm |", "|---|---:|"]
        lines += [f"| {name} | {fmt.number(norm)} |" for name, norm in body[TOP_LAYERS]]
    if body[RESUME]:
        lines += ["", "## Resume from the checkpoint", "", "```python", body[RESUME], "```"]
    hardware = body[HARDWARE]
    if hardware:
        lines += ["", "## Latest hardware sample", "", "```json",
                  json.dumps(records.to_strict(dict(hardware)), indent=2), "```"]
    lines += ["", f"## Last {len(body[HISTORY])} steps", "",
              "| step | loss | loss (smoothed) | grad norm | lr | skipped |",
              "|---:|---:|---:|---:|---:|:---:|"]
    for row in body[HISTORY]:
        lines.append(f"| {row[Step.STEP]} | {fmt.number(row[Step.LOSS])} | "
                     f"{fmt.number(row[Step.LOSS_SMOOTH])} | {fmt.number(row[Step.GRAD_NORM])} | "
                     f"{fmt.lr(row[Step.LR])} | {'yes' if row[Step.SKIPPED] else ''} |")
    return "\n".join(lines) + "\n"
