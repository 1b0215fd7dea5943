"""Several runs on one report page: a label per run directory and each run's line in the
table of runs (``compare.py`` draws the page).

A label is what the reader sees in legends, tooltips and tables, so it is as short as it can
be while still telling the runs apart: the directory's basename, or, when two runs share it,
the fewest trailing path parts that differ (``a/seed1`` and ``b/seed1``).
"""
from __future__ import annotations

import math
import os
from collections import Counter
from dataclasses import dataclass
from typing import Any

from ..records import Anomaly, End, Step
from .panels import Scanned
from .summary import NO_END


def _parts(directory: str) -> list[str]:
    return [part for part in os.path.abspath(directory).split(os.sep) if part]


def run_labels(directories: list[str]) -> list[str]:
    """One label per directory, unique as long as the directories are distinct: the last
    ``k`` path parts, ``k`` the smallest that no other directory shares at its own ``k``;
    the whole absolute path when that is all there is (``/run`` beside ``/a/run``)."""
    parts = [_parts(d) for d in directories]
    labels = []
    for index, mine in enumerate(parts):
        others = [p for i, p in enumerate(parts) if i != index]
        k = 1
        while k <= len(mine) and any(p[-k:] == mine[-k:] for p in others):
            k += 1
        labels.append(os.path.abspath(directories[index]) if k > len(mine)
                      else "/".join(mine[-k:]))
    return labels


@dataclass
class RunRow:
    """A run as the table of runs shows it. ``final_loss``: the last finite loss of its
    lowest rank, at step ``final_loss_step``; ``elapsed_s``: the longest rank's, from its
    ``end`` record (None without one)."""
    label: str
    ranks: int
    last_step: int | None
    final_loss: float | None
    final_loss_step: int | None
    elapsed_s: float | None
    end: str
    anomalies: int
    kinds: dict[str, int]

    def kinds_text(self) -> str:
        """``gradient_explode x2, loss_spike`` (most frequent first)."""
        return ", ".join(kind if count == 1 else f"{kind} x{count}"
                         for kind, count in self.kinds.items())


def _last_finite(steps: Any, losses: Any) -> tuple[int | None, float | None]:
    # From the end: a healthy run's last loss is finite, so this looks at one value.
    for index in range(len(losses) - 1, -1, -1):
        value = losses[index]
        if value is not None and math.isfinite(value):
            return steps[index], value
    return None, None


def run_row(label: str, scanned: list[Scanned]) -> RunRow:
    """The table row of one run, from the scans of its ranks (in rank order)."""
    scans = [s.scan for s in scanned]
    lowest = scans[0].steps
    step, loss = _last_finite(lowest[Step.STEP], lowest[Step.LOSS])
    last_steps = lowest[Step.STEP]
    elapsed = [e for scan in scans if scan.end is not None
               and isinstance(e := scan.end.get(End.ELAPSED_S), (int, float))]
    endings = [str(scan.end.get(End.REASON)) if scan.end else NO_END for scan in scans]
    kinds = Counter(str(a.get(Anomaly.ANOMALY)) for scan in scans for a in scan.anomalies)
    return RunRow(label=label, ranks=len(scans),
                  last_step=last_steps[-1] if len(last_steps) else None,
                  final_loss=loss, final_loss_step=step,
                  elapsed_s=max(elapsed) if elapsed else None,
                  end=", ".join(dict.fromkeys(endings)),      # distinct, in rank order
                  anomalies=sum(kinds.values()), kinds=dict(kinds.most_common()))
