"""Handing the host's step limits (spike limits, the LR limit) to wrap's graph.

The spike rules' windows move their limits a little at every step, and each write is a
host-to-device copy (a ``set_data`` measured ~1.8 ms on the CPU on the demo model, more than
everything else mindwatch does in a step; the in-place ``ops.assign`` used now is also a
kernel launch and a copy). So a limit is written only when it moved by
more than ``LIMIT_SLACK``; the graph's spike limit is then at most that much laxer than the
rule's, and the host repeats the graph's decision with the limits the graph holds, so records
and actions still say what happened. The LR limit moves in steps of 5% and is always written.
"""
from __future__ import annotations

import math

from ...recovery.skipping import SkipLimits
from .wrap import MonitoredTrainStep

LIMIT_SLACK = 0.02      # relative move of a limit that is worth a write


class GraphLimits:
    """What the train step's graph holds, and the writes that keep it current."""

    def __init__(self) -> None:
        self._pushed: tuple[float, float, float] | None = None

    def forget(self) -> None:
        """A new graph holds no limits yet: the next ``push`` writes."""
        self._pushed = None

    def push(self, step: MonitoredTrainStep | None, limits: SkipLimits) -> None:
        if step is None:
            return
        current = (limits.loss, limits.grad_norm, limits.lr)
        if self._pushed is None or any(map(_moved, self._pushed, current)):
            step.set_limits(loss=limits.loss, grad_norm=limits.grad_norm, lr=limits.lr)
            self._pushed = current


def _moved(pushed: float, current: float) -> bool:
    if pushed == current:
        return False
    if math.isinf(pushed) or math.isinf(current):
        return True
    return abs(current - pushed) > LIMIT_SLACK * abs(pushed)
