"""Reading ``bad_batches.jsonl``, the ledger of bad batches (decisions/bad_batches.py writes
it): for the monitor that withholds them again, and for the views that name them."""
from __future__ import annotations

import json
import os
from typing import Any

from ..basics.batch_identity import FINGERPRINT

LEDGER = "bad_batches.jsonl"


def read_ledger(path: str) -> list[dict[str, Any]]:
    """The entries of a ledger file; a torn last line (a crash mid-write) is left out.
    Raises ValueError naming the file and the line for anything else unreadable."""
    entries = []
    with open(path, encoding="utf-8") as handle:
        lines = handle.read().split("\n")
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            entry = json.loads(line)
        except json.JSONDecodeError as exc:
            if number == len(lines):        # the last line, unfinished: a crash's
                continue
            raise ValueError(f"{path}:{number}: not a bad-batch ledger line ({exc}); fix or "
                             "remove the line") from exc
        if not isinstance(entry, dict) or not isinstance(entry.get(FINGERPRINT), str):
            raise ValueError(f"{path}:{number}: a ledger line needs a 'fingerprint' string; "
                             "is this a mindwatch bad_batches.jsonl?")
        entries.append(entry)
    return entries


def read_run_ledger(directory: str) -> list[dict[str, Any]]:
    """The ledger of a run directory; empty where it has none."""
    path = os.path.join(directory, LEDGER)
    return read_ledger(path) if os.path.isfile(path) else []
