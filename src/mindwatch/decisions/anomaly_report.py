"""The anomaly report: ``anomalies/step<N>_rank<R>.json`` for tools, ``.md`` for people."""
from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping
from typing import Any

from .. import records
from ..anomaly import GRAD_SPIKE, GRADIENT_EXPLODE, GRADIENT_NONFINITE, GRADIENT_VANISH, Anomaly
from ..basics import format as fmt
from ..basics.run_dir import unused_report_stem, write_text_atomically
from ..events import detail
from ..records import Anomaly as Record
from ..records import Common, Step
from .job_share import section_lines

HISTORY_STEPS = 50
# The step fields each history row keeps.
HISTORY_FIELDS = (Step.STEP, Step.LOSS, Step.LOSS_SMOOTH, Step.GRAD_NORM, Step.LR, Step.SKIPPED,
                  Step.EPOCH, Step.EPOCH_STEP)
# Where the anomaly's step lies in its epoch, from its step record (null when unknown).
EPOCH_FIELDS = (Step.EPOCH, Step.EPOCH_STEP, Step.STEPS_PER_EPOCH)
# The report's own fields, beside the anomaly record's. ``resume_from``: the state the advice
# names and why (last_good.ResumeAdvice.as_record: path, step, onset, why); ``resume``: the
# code that loads it.
NOTES, RESUME, RESUME_FROM, HARDWARE, TOP_LAYERS, HISTORY = (
    "notes", "resume", "resume_from", records.HARDWARE, "top_layers", "history")
# Rank 0's report of a job-level event under a replicated state (job_share.py): which ranks
# found what, and the origin rank with its host and device. Absent from other reports.
JOB = "job"
# The anomalies whose report names the layers with the largest gradient norm, and how many.
GRADIENT_KINDS = (GRADIENT_NONFINITE, GRADIENT_EXPLODE, GRADIENT_VANISH, GRAD_SPIKE)
TOP_LAYER_COUNT = 5
# The fence language of resume advice that does not name its own (a plain str)
DEFAULT_LANGUAGE = "python"


class Snippet(str):
    """Resume advice (``FrameworkHooks.resume_hint``'s result) that names its language, for
    the report's code fence: ``Snippet("load_checkpoint: ...", "yaml")``. A plain str is
    taken for Python. It is a str everywhere else (the JSON report holds the text)."""

    language: str

    def __new__(cls, text: str, language: str = DEFAULT_LANGUAGE) -> Snippet:
        snippet = super().__new__(cls, text)
        snippet.language = language
        return snippet


def write_report(*, log_dir: str, rank: int, anomaly: Anomaly, history: list[Mapping[str, Any]],
                 hardware: Mapping[str, Any] | None, notes: list[str],
                 resume_snippet: str | None, top_layers: list[list] | None = None,
                 resume_from: Mapping[str, Any] | None = None,
                 job: Mapping[str, Any] | None = None, stem: str | None = None) -> str:
    """Write both files, under a name no earlier report holds (``unused_report_stem``), or
    at ``stem`` (a report written again); returns the JSON path. ``history`` is the last
    step records; ``job``: the job's section (job_share.py)."""
    stem = stem or unused_report_stem(log_dir, anomaly.step or 0, rank, anomaly.kind)
    os.makedirs(os.path.dirname(stem), exist_ok=True)
    steps = [{name: r.get(name) for name in HISTORY_FIELDS} for r in history[-HISTORY_STEPS:]]
    own: Mapping[str, Any] = next(
        (r for r in reversed(history) if r.get(Step.STEP) == anomaly.step), {})
    body: dict[str, Any] = {
        Record.ANOMALY: anomaly.kind, Record.STEP: anomaly.step,
        **{name: own.get(name) for name in EPOCH_FIELDS}, Common.RANK: rank,
        Record.VALUE: anomaly.value, Record.THRESHOLD: anomaly.threshold,
        Record.MESSAGE: anomaly.message, Record.ACTIONS: anomaly.actions,
        Record.CHECKPOINT: anomaly.checkpoint, **anomaly.fields, NOTES: notes,
        RESUME: resume_snippet, RESUME_FROM: resume_from,
        HARDWARE: hardware, TOP_LAYERS: top_layers, HISTORY: steps,
        **({} if job is None else {JOB: dict(job)}),
    }
    return write_report_files(stem, body, _markdown(body))


def top_layers(anomaly: Anomaly, layer_norms: tuple[int, Mapping[str, float]] | None
               ) -> list[list] | None:
    """For gradient anomalies: the layers with the largest (or non-finite) gradient norm
    at that step, from the latest per-layer norms ``(step, {layer: norm})`` when measured."""
    if anomaly.kind not in GRADIENT_KINDS or layer_norms is None:
        return None
    step, norms = layer_norms
    if step != anomaly.step:
        return None
    # NaN/Inf first, then by size; a vanishing gradient is reported by its largest layers.
    ranked = sorted(norms.items(), key=lambda item: (math.isfinite(item[1]), -abs(item[1])
                                                      if math.isfinite(item[1]) else 0))
    return [[name, value] for name, value in ranked[:TOP_LAYER_COUNT]]


def write_report_files(stem: str, body: Mapping[str, Any], markdown: str) -> str:
    """``<stem>.json`` (the run log's strict JSON) and ``<stem>.md``, each written atomically;
    returns the JSON file's path."""
    json_path = stem + ".json"
    write_text_atomically(json_path, records.encode(body) + "\n")
    write_text_atomically(stem + ".md", markdown)
    return json_path


def in_epoch(record: Mapping[str, Any]) -> str:
    """"epoch 2, step 6 of 20": where a step record's (or report's) step lies in its epoch,
    the numbers MindFormers' MFLossMonitor prints; "" when its epoch step is unknown."""
    epoch_step = record.get(Step.EPOCH_STEP)
    if epoch_step is None:
        return ""
    per_epoch, epoch = record.get(Step.STEPS_PER_EPOCH), record.get(Step.EPOCH)
    where = f"step {epoch_step}" + (f" of {per_epoch}" if per_epoch else "")
    return where + " of its epoch" if epoch is None else f"epoch {epoch}, {where}"


def _markdown(body: Mapping[str, Any]) -> str:
    where = in_epoch(body)
    lines = [
        f"# Anomaly: {body[Record.ANOMALY]} at step {body[Record.STEP]} "
        f"({where + '; ' if where else ''}rank {body[Common.RANK]})", "",
        # the replay's verdict (a field of its own in the JSON) read on after the message
        detail(body[Record.MESSAGE], body.get(Record.REPLAY_VERDICT)), "",
        f"- value: {fmt.number(body[Record.VALUE])}",
        f"- threshold: {fmt.number(body[Record.THRESHOLD])}",
        f"- actions taken: {', '.join(body[Record.ACTIONS]) or 'none'}",
        f"- checkpoint: {body[Record.CHECKPOINT] or 'none written'}",
    ]
    lines += [f"- {note}" for note in body[NOTES]]
    if body.get(JOB):
        lines += section_lines(body[JOB])
    if body[TOP_LAYERS]:
        lines += ["", "## Layers with the largest gradient norm at this step", "",
                  "| layer | gradient L2 norm |", "|---|---:|"]
        lines += [f"| {name} | {fmt.number(norm)} |" for name, norm in body[TOP_LAYERS]]
    lines += _resume_section(body[RESUME], body[RESUME_FROM])
    hardware = body[HARDWARE]
    if hardware:
        lines += ["", "## Latest hardware sample", "", "```json",
                  json.dumps(records.to_strict(dict(hardware)), indent=2), "```"]
    # the step within its epoch beside the global one, where the rows know it
    epochs = any(row.get(Step.EPOCH_STEP) is not None for row in body[HISTORY])
    lines += ["", f"## Last {len(body[HISTORY])} steps", "",
              f"| step |{' epoch, step |' if epochs else ''} loss | loss (smoothed) | "
              "grad norm | lr | skipped |",
              f"|---:|{'---:|' if epochs else ''}---:|---:|---:|---:|:---:|"]
    for row in body[HISTORY]:
        place = f" {_epoch_cell(row)} |" if epochs else ""
        lines.append(f"| {row[Step.STEP]} |{place} {fmt.number(row[Step.LOSS])} | "
                     f"{fmt.number(row[Step.LOSS_SMOOTH])} | {fmt.number(row[Step.GRAD_NORM])} | "
                     f"{fmt.lr(row[Step.LR])} | {'yes' if row[Step.SKIPPED] else ''} |")
    return "\n".join(lines) + "\n"


def _resume_section(snippet: str | None, resume_from: Mapping[str, Any] | None) -> list[str]:
    """The code that resumes; after damaged weights (an onset), under a heading of its own
    that says from what and why, or, when no good state exists, what to do instead."""
    language = getattr(snippet, "language", DEFAULT_LANGUAGE)
    if not resume_from or resume_from.get("onset") is None:
        return ["", "## Resume from the checkpoint", "", f"```{language}", snippet, "```"] \
            if snippet else []
    onset = resume_from["onset"]
    if not snippet:
        return ["", f"## Resume from before step {onset}", "", f"{resume_from['why']}."]
    return ["", f"## Resume from the last good state, saved after step {resume_from['step']}",
            "", f"{resume_from['why']}.", "", f"```{language}", snippet, "```"]


def _epoch_cell(row: Mapping[str, Any]) -> str:
    epoch, epoch_step = row.get(Step.EPOCH), row.get(Step.EPOCH_STEP)
    if epoch_step is None:
        return ""
    return f"{'-' if epoch is None else epoch}, {epoch_step}"
