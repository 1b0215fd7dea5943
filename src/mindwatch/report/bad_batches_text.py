"""The bad batches a run met (``bad_batches.jsonl``), as ``mindwatch summary`` and the report
name them: which step, which samples, what they did, and how to be rid of them."""
from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ..basics import format as fmt
from ..records import BadBatch
from ..runlog.bad_batches import LEDGER, read_run_ledger

SHOWN = 3            # batches named one by one; the rest counted (the summary's 20 lines)


def batch_line(entry: Mapping[str, Any]) -> str:
    """"step 3 (epoch 1): loss_nonfinite, samples 16-23, batch b022163f5e8ab930 (failed
    again on replay)"."""
    epoch = entry.get(BadBatch.EPOCH)
    samples = _samples(entry.get(BadBatch.INDICES))
    replayed = {True: " (failed again on replay)", None: ""}.get(
        entry.get(BadBatch.REPRODUCED), "")
    return (f"step {entry.get(BadBatch.STEP)}" + (f" (epoch {epoch})" if epoch is not None
                                                  else "")
            + f": {', '.join(entry.get(BadBatch.KINDS) or [])}"
            + (f", samples {samples}" if samples else "")
            + f", batch {entry.get(BadBatch.FINGERPRINT)}{replayed}")


def ledger_lines(entries: Sequence[Mapping[str, Any]]) -> list[str]:
    """The summary's lines for ``entries`` (none when there are none)."""
    if not entries:
        return []
    lines = [f"bad batches ({LEDGER}): {fmt.count(len(entries), 'batch', 'batches')}; "
             "resume=True (or skip_batches= this file) withholds them by themselves; to drop "
             f"them from the data, {_how_to_drop(entries)}"]
    lines += [f"  {batch_line(entry)}" for entry in entries[:SHOWN]]
    if len(entries) > SHOWN:
        lines.append(f"  and {len(entries) - SHOWN} more in {LEDGER}")
    return lines


def _how_to_drop(entries: Sequence[Mapping[str, Any]]) -> str:
    """Leave out the samples named; where a batch's are not known (MindSpore's datasets,
    a loop that gave none), find the batch by its content."""
    if all(_samples(entry.get(BadBatch.INDICES)) for entry in entries):
        return "leave out the samples named"
    return ("leave out the samples named; where none are, find the batch in the data's "
            "order by its content: mindwatch.batch_fingerprint(*inputs) gives its fingerprint")


def _samples(indices: Any) -> str:
    """Indices as runs: "16-23, 40"."""
    if not isinstance(indices, list) or not indices:
        return ""
    ordered = sorted(int(i) for i in indices)
    runs, start, last = [], ordered[0], ordered[0]
    for index in [*ordered[1:], None]:
        if index is not None and index == last + 1:
            last = index
            continue
        runs.append(str(start) if start == last else f"{start}-{last}")
        if index is not None:
            start = last = index
    return ", ".join(runs[:8]) + (", ..." if len(runs) > 8 else "")


def bad_batches_section(directory: str, table: Callable[..., str],
                        esc: Callable[[str], str]) -> str:
    """The report's ``<h2>`` and table of the directory's bad batches; "" without any, and a
    line saying so for a ledger that cannot be read (the rest of the page stands)."""
    try:
        entries = read_run_ledger(directory)
    except (OSError, ValueError) as exc:
        return f"<h2>Bad batches</h2><p>{esc(f'{LEDGER} could not be read: {exc}')}</p>"
    if not entries:
        return ""
    rows = [
        "<tr>" + "".join(f"<td>{esc(str(value))}</td>" for value in (
            entry.get(BadBatch.STEP), entry.get(BadBatch.EPOCH),
            ", ".join(entry.get(BadBatch.KINDS) or []),
            _samples(entry.get(BadBatch.INDICES)) or "not known",
            entry.get(BadBatch.FINGERPRINT), entry.get(BadBatch.ORIGIN_RANK),
            {True: "failed again", None: "none ran"}.get(entry.get(BadBatch.REPRODUCED),
                                                         "came out healthy")))
        + "</tr>" for entry in entries]
    return (f'<h2 id="bad-batches">Bad batches ({len(entries)})</h2>'
            f"<p>{esc(f'From {LEDGER}: the batches a restarted run would meet again. ')}"
            f"{esc('A run resumed on this directory (resume=True), or given skip_batches=')}"
            f"{esc(f'<this directory>/{LEDGER}, withholds their updates by itself, whatever ')}"
            f"{esc(f'the step; to drop them from the data instead, {_how_to_drop(entries)}.')}"
            "</p>"
            + table(["step", "epoch", "anomalies", "samples", "batch fingerprint",
                     "rank", "replay"], rows, "bad-batches"))
