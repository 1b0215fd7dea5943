"""The hang report: ``anomalies/hang_step<N>_rank<R>.json`` for tools, ``.md`` for people.

It holds every Python thread's stack at the moment the watchdog noticed the stall (taken with
``sys._current_frames``): the training thread's shows where it waits (a dataset iterator, a
collective in the step or in the ranks' exchange), a data-loader thread's the line the data
source is stuck on. Frames inside C code (a collective kernel) show as the Python call that
entered it.
"""
from __future__ import annotations

import json
import os
import sys
import threading
import traceback
from collections.abc import Mapping, Sequence
from typing import Any

from .. import records
from ..anomaly import Anomaly
from ..basics import format as fmt
from ..basics.run_dir import hang_report_stem
from ..records import Anomaly as Record
from ..records import Common, Step
from .anomaly_report import HARDWARE, HISTORY, HISTORY_FIELDS, write_report_files

# The report's own fields, beside the anomaly record's; one entry of THREADS, one frame.
THREADS = "threads"
NAME, IDENT, DAEMON, TRAINING, STACK = "name", "ident", "daemon", "training", "stack"
FILE, LINE, FUNCTION, CODE = "file", "line", "function", "code"
WHERE_FRAMES = 3            # innermost frames in the ``where`` string
# The files of the data loaders a training thread waits in for its next batch.
LOADERS = ("/mindspore/dataset/", "/mindspore/train/dataset_helper",
           "/torch/utils/data/", "/datasets/")
HISTORY_STEPS = 10


def thread_stacks(training_thread: int | None) -> list[dict[str, Any]]:
    """Every Python thread's stack but the caller's (the watchdog), outermost frame first;
    the training thread first."""
    frames = sys._current_frames()
    known = {thread.ident: thread for thread in threading.enumerate()}
    me = threading.get_ident()
    found = []
    for ident, frame in frames.items():
        if ident == me:
            continue
        thread = known.get(ident)
        found.append({
            NAME: thread.name if thread is not None else f"thread {ident}", IDENT: ident,
            DAEMON: thread.daemon if thread is not None else None,
            TRAINING: ident == training_thread,
            STACK: [{FILE: f.filename, LINE: f.lineno, FUNCTION: f.name, CODE: f.line}
                    for f in traceback.extract_stack(frame)]})
    return sorted(found, key=lambda t: (not t[TRAINING], str(t[NAME])))


def where(threads: Sequence[Mapping[str, Any]]) -> str | None:
    """The training thread's innermost frames, innermost first:
    ``"sleep_in_loader (train.py:42) <- __next__ (iterators.py:150) <- ..."``."""
    return where_in(training_stack(threads))


def where_in(stack: Sequence[Mapping[str, Any]] | None) -> str | None:
    """``where`` of one thread's ``stack`` (outermost frame first)."""
    if not stack:
        return None
    return " <- ".join(f"{f[FUNCTION]} ({os.path.basename(f[FILE])}:{f[LINE]})"
                       for f in reversed(stack[-WHERE_FRAMES:]))


def stack_of(ident: int) -> list[dict[str, Any]] | None:
    """One thread's stack, outermost frame first, without its source lines (a heartbeat
    takes it every few seconds: ~50 us for 50 frames); None when the thread is gone."""
    frame = sys._current_frames().get(ident)
    if frame is None:
        return None
    summary = traceback.StackSummary.extract(traceback.walk_stack(frame), lookup_lines=False)
    return [{FILE: f.filename, LINE: f.lineno, FUNCTION: f.name, CODE: None}
            for f in reversed(summary)]


def training_stack(threads: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The training thread's stack among ``thread_stacks``' (empty when none is known)."""
    return next((list(t[STACK]) for t in threads if t[TRAINING]), [])


def in_data_loader(stack: Sequence[Mapping[str, Any]] | None) -> bool:
    """The thread of ``stack`` waits inside a data loader's code: MindSpore's dataset
    iterators, PyTorch's DataLoader, a dataset helper."""
    return any(marker in f[FILE].replace(os.sep, "/") for f in stack or ()
               for marker in LOADERS)


def write_hang_report(*, log_dir: str, rank: int, anomaly: Anomaly, where_: str | None,
                      threads: Sequence[Mapping[str, Any]], hardware: Mapping[str, Any] | None,
                      history: list[Mapping[str, Any]]) -> str:
    """Write both files; returns the JSON path."""
    stem = hang_report_stem(log_dir, anomaly.step or 0, rank)
    os.makedirs(os.path.dirname(stem), exist_ok=True)
    body: dict[str, Any] = {
        Record.ANOMALY: anomaly.kind, Record.STEP: anomaly.step, Common.RANK: rank,
        Record.VALUE: anomaly.value, Record.THRESHOLD: anomaly.threshold,
        Record.MESSAGE: anomaly.message, Record.ACTIONS: anomaly.actions,
        Record.WHERE: where_, HARDWARE: hardware, THREADS: threads,
        HISTORY: [{name: r.get(name) for name in HISTORY_FIELDS}
                  for r in history[-HISTORY_STEPS:]],
    }
    return write_report_files(stem, body, _markdown(body))


def _markdown(body: Mapping[str, Any]) -> str:
    lines = [
        f"# Hang: no step ended after step {body[Record.STEP]} (rank {body[Common.RANK]})", "",
        body[Record.MESSAGE], "",
        f"- seconds since the last step ended: {fmt.number(body[Record.VALUE])}",
        f"- timeout in force: {fmt.number(body[Record.THRESHOLD])} s",
        f"- actions taken: {', '.join(body[Record.ACTIONS]) or 'none'}",
        f"- the training thread waits in: {body[Record.WHERE] or 'unknown'}",
    ]
    for thread in body[THREADS]:
        role = " (training thread)" if thread[TRAINING] else ""
        lines += ["", f"## Thread {thread[NAME]}{role}", "", "```text",
                  "Traceback (most recent call last):"]
        for frame in thread[STACK]:
            lines.append(f'  File "{frame[FILE]}", line {frame[LINE]}, in {frame[FUNCTION]}')
            if frame[CODE]:
                lines.append(f"    {frame[CODE]}")
        lines.append("```")
    hardware = body[HARDWARE]
    lines += ["", "## Latest hardware sample", ""]
    lines += (["```json", json.dumps(records.to_strict(dict(hardware)), indent=2), "```"]
              if hardware else ["none taken (hardware_interval_s=None, or none yet)"])
    if body[HISTORY]:
        lines += ["", f"## Last {len(body[HISTORY])} steps", "",
                  "| step | loss | grad norm | lr |", "|---:|---:|---:|---:|"]
        lines += [f"| {row[Step.STEP]} | {fmt.number(row[Step.LOSS])} | "
                  f"{fmt.number(row[Step.GRAD_NORM])} | {fmt.lr(row[Step.LR])} |"
                  for row in body[HISTORY]]
    return "\n".join(lines) + "\n"
