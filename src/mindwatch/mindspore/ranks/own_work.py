"""This rank's own work in a step, for the straggler's cause (detectors/slow_cause.py): the
process's CPU seconds from the step's begin to its end, on the CPU only.

The step's collective is inside the compiled graph, so no host call sees when a rank enters
it. On the CPU the graph's kernels run on this process's threads and a rank that waits in the
all-reduce for a slower one burns (almost) no CPU: measured with msrun, 8 ranks on 2 cores,
one rank's network doing an extra 320x320 matmul, the ranks' medians of CPU seconds per step
were 12.1-13.3 ms and the slow rank's 15.8 ms, while every rank's step took the same 62-63 ms
of wall time (docs/scale.md#slow-ranks-by-cause). On a device (Ascend, GPU) the host's CPU
time says nothing of the device's compute: None there (the profiler's step trace tells it).
The input pipeline's worker threads count too: a rank whose input transforms cost more CPU
shows here unless its data time grows first (then the data rule names it).
"""
from __future__ import annotations

import time
from collections.abc import Callable

import mindspore as ms


class OwnWork:
    def __init__(self, cpu_seconds: Callable[[], float] = time.process_time,
                 on_cpu: Callable[[], bool] | None = None):
        self._cpu_seconds = cpu_seconds
        self._on_cpu = on_cpu or (lambda: ms.get_context("device_target") == "CPU")
        self._measures: bool | None = None      # decided at the first step
        self._mark: float | None = None

    def begin(self) -> None:
        """At the step's begin."""
        if self._measures is None:
            self._measures = bool(self._on_cpu())
        self._mark = self._cpu_seconds() if self._measures else None

    def end(self, steps: int = 1) -> float | None:
        """At the step's end: CPU seconds per step since ``begin`` (``steps``: how many steps
        the callback covered, sink mode); None on a device or without a begin."""
        if self._mark is None:
            return None
        spent, self._mark = self._cpu_seconds() - self._mark, None
        return max(spent, 0.0) / max(steps, 1)
