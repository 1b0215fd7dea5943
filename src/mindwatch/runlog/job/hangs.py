"""The hangs the rank logs hold, for a job view whose job log names none (a job log written
before its ``hang`` records existed tells a hang only by its goodput's hang time).

Each rank log is searched for its ``hang`` anomalies by their bytes (``"anomaly":"hang"``,
and the ``run`` lines that start a segment), a chunk at a time: no line is decoded but
those, so a log costs the time to read it (~1 GB/s), not to parse it. The logs are searched
while their sizes add up to ``SCAN_BYTES`` (the logs of rank 0 first: it always waits when
any rank hangs, in the step's collective); beyond, the others are not read, and the view
says so (``Hangs.searched``).
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, field

from ... import records
from ...anomaly import HANG
from ...basics.run_dir import rank_logs
from ...records import Anomaly
from ..lines import Record
from ..reader import CHUNK_BYTES

SCAN_BYTES = 2**30
_HANG = b'"anomaly":"' + HANG.encode() + b'"'
_RUN = b'{"kind":"' + records.RUN.encode() + b'"'


@dataclass
class Hangs:
    found: list[Record] = field(default_factory=list)   # their latest segments' hangs
    searched: int = 0                                    # rank logs searched
    logs: int = 0                                        # rank logs in the directory


def latest_hangs(path: str) -> list[Record]:
    """The ``hang`` anomaly records of the latest segment of the rank log at ``path``."""
    found: list[Record] = []
    pending = b""
    try:
        with open(path, "rb") as handle:
            while chunk := handle.read(CHUNK_BYTES):
                data = pending + chunk
                cut = data.rfind(b"\n") + 1
                data, pending = data[:cut], data[cut:]
                last = data.rfind(b"\n" + _RUN)
                last = last + 1 if last >= 0 else (0 if data.startswith(_RUN) else -1)
                if last >= 0:             # a new segment: its hangs are the ones that count
                    found, data = [], data[last:]
                found += _decoded(data)
    except OSError:
        return []
    return found + _decoded(pending)


def _decoded(data: bytes) -> list[Record]:
    found = []
    at = data.find(_HANG)
    while at >= 0:
        start = data.rfind(b"\n", 0, at) + 1
        end = data.find(b"\n", at)
        end = len(data) if end < 0 else end
        try:
            record = json.loads(data[start:end])
        except ValueError:
            record = None
        if isinstance(record, dict) and record.get(Anomaly.ANOMALY) == HANG \
                and record.get("kind") == records.ANOMALY:
            found.append(record)
        at = data.find(_HANG, end)
    return found


def search(directory: str, budget: int = SCAN_BYTES) -> Hangs:
    """The hangs of every rank log of ``directory`` within ``budget`` bytes, rank 0's first."""
    ranked = sorted(rank_logs(directory), key=lambda pair: (pair[0] != 0, pair[0]))
    hangs, spent = Hangs(logs=len(ranked)), 0
    for rank, path in ranked:
        try:
            size = os.stat(path).st_size
        except OSError:
            continue
        if hangs.searched and spent + size > budget:
            break
        spent += size
        hangs.searched += 1
        for record in latest_hangs(path):
            record.setdefault("rank", rank)
            hangs.found.append(record)
    return hangs
