"""The console view: an aligned line every N steps, anomalies and epoch verdicts as they come,
and a progress bar with ETA when (and only when) the stream is a terminal.

The anomalies of one step are one line (``mindwatch.events``): the monitor writes what one
step's review found together (``write_many``), so the line is printed as those records are
written, not held for a later record that may come minutes later, or never (a hang).
Anomalies written at another moment of the same step (what the ranks' exchange after it
found: a peer's stop, a straggler, a rewind settled together) are a line of their own.
"""
from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from typing import Any, TextIO

from .. import records
from ..basics import format as fmt
from ..events import Event, event_line, group
from ..records import Common, End, Epoch, Notice, Rewind, Run, Step, Versions
from .base import Sink

_BAR_WIDTH = 24


class ConsoleSink(Sink):
    """``verbose=False`` keeps only what a non-zero rank must still say: anomalies and errors."""

    def __init__(self, *, rank: int = 0, print_interval: int = 10, verbose: bool = True,
                 stream: TextIO | None = None, progress: bool | None = None):
        self.stream = stream if stream is not None else sys.stdout
        self.rank = rank
        self.print_interval = print_interval
        self.verbose = verbose
        isatty = getattr(self.stream, "isatty", lambda: False)
        self.progress = (isatty() and verbose) if progress is None else progress
        self.total_steps: int | None = None
        self._bar_shown = False
        self._last_step = 0
        self._eta_s: float | None = None
        # the first step this segment trained (after a resume, the one after the step resumed
        # from): the end line counts the segment's own steps
        self._first_trained: int | None = None
        # the latest step record's (step, epoch, epoch_step): its anomalies name them too
        self._place: tuple[Any, Any, Any] | None = None

    # -- output helpers -------------------------------------------------------------------
    def _line(self, text: str) -> None:
        if self._bar_shown:
            self.stream.write("\r\x1b[2K")
            self._bar_shown = False
        self.stream.write(f"[rank {self.rank}] {text}\n")
        self.stream.flush()

    def _draw_bar(self) -> None:
        if not self.progress or not self.total_steps:
            return
        done = min(self._last_step, self.total_steps)
        filled = int(_BAR_WIDTH * done / self.total_steps)
        bar = "#" * filled + "." * (_BAR_WIDTH - filled)
        self.stream.write(f"\r\x1b[2K[{bar}] {done}/{self.total_steps} ETA "
                          f"{fmt.duration(self._eta_s)}")
        self.stream.flush()
        self._bar_shown = True

    # -- records --------------------------------------------------------------------------
    def write(self, record: Mapping[str, Any]) -> None:
        kind = record.get(Common.KIND)
        if kind == records.RUN:
            self._first_trained = None
        if kind == records.STEP:
            self._step(record)
        elif kind == records.ANOMALY:
            self._event(Event((record,)))
        elif kind == records.NOTICE:
            self._line(f"note: {record.get(Notice.MESSAGE)}")
        elif kind == records.REWIND:
            self._line(f"REWIND at step {record.get(Rewind.STEP)} ({record.get(Rewind.ANOMALY)}"
                       f"): training state of step {record.get(Rewind.TO_STEP)} restored, "
                       f"rewind {record.get(Rewind.REWINDS)}")
        elif not self.verbose:
            if kind == records.END and record.get(End.REASON) == records.ERROR:
                self._line(f"training failed: {record.get(End.ERROR)}")
        elif kind == records.EPOCH:
            self._epoch(record)
        elif kind == records.RUN:
            self._line(f"mindwatch {record[Run.VERSIONS].get(Versions.MINDWATCH)} logging to "
                       f"{record.get(Run.LOG_PATH)}")
        elif kind == records.END:
            detail = f": {record[End.ERROR]}" if record.get(End.ERROR) else ""
            self._line(f"training {record[End.REASON]} {self._trained(record.get(End.STEPS))} "
                       f"in {fmt.duration(record.get(End.ELAPSED_S))}{detail}")

    def write_many(self, records_: Sequence[Mapping[str, Any]]) -> None:
        """One line per event among the anomalies written together, in order; any other
        record as ``write`` prints it."""
        anomalies: list[Mapping[str, Any]] = []
        for record in [*records_, {}]:          # {}: the end, which flushes the last event
            if record.get(Common.KIND) == records.ANOMALY:
                anomalies.append(record)
                continue
            for event in group(anomalies):
                self._event(event)
            anomalies = []
            if record:
                self.write(record)

    def _event(self, event: Event) -> None:
        self._line(f"ANOMALY {event_line(event, self._in_epoch(event.step))}")

    def _step(self, record: Mapping[str, Any]) -> None:
        step = record[Step.STEP]
        covered = record.get(Step.STEPS_COVERED, 1)
        first = step - covered + 1
        self._last_step = step
        self._eta_s = record.get(Step.ETA_S)
        if self._first_trained is None:
            self._first_trained = first
        self._place = (step, record.get(Step.EPOCH), record.get(Step.EPOCH_STEP))
        if self.verbose and (step // self.print_interval) > ((first - 1) // self.print_interval):
            total = f"/{self.total_steps}" if self.total_steps else ""
            width = len(str(self.total_steps)) if self.total_steps else 6
            skipped = "  SKIPPED" if record.get(Step.SKIPPED) else ""
            self._line(
                f"epoch {record.get(Step.EPOCH) or '-':>3} step {step:>{width}}{total} | "
                f"loss {fmt.number(record.get(Step.LOSS)):>9} "
                f"(smooth {fmt.number(record.get(Step.LOSS_SMOOTH)):>9}) | "
                f"lr {fmt.lr(record.get(Step.LR)):>8} | "
                f"grad {fmt.number(record.get(Step.GRAD_NORM)):>9} | "
                f"{fmt.duration(record.get(Step.STEP_TIME_S)):>9}/step | "
                f"{fmt.rate(record.get(Step.SAMPLES_PER_S))}{_tokens(record)}{_eta(record)}"
                f"{skipped}")
        self._draw_bar()

    def _trained(self, last: Any) -> str:
        """"after 20 steps"; "at step 20 after 10 steps" for a segment resumed after step 10
        (its own steps, not the run's count)."""
        first = self._first_trained
        if not isinstance(last, int) or first is None or first == 1:
            return f"after {last} steps"
        return f"at step {last} after {fmt.count(max(0, last - first + 1), 'step')}"

    def _in_epoch(self, step: Any) -> str:
        """" (epoch 2 step 6)" for an anomaly of the latest step record's step, when it
        carries its step within the epoch; "" otherwise."""
        if self._place is None or self._place[0] != step or self._place[2] is None:
            return ""
        _, epoch, epoch_step = self._place
        return f" (epoch {epoch} step {epoch_step})" if epoch is not None else \
            f" (epoch step {epoch_step})"

    def _epoch(self, record: Mapping[str, Any]) -> None:
        verdict = record.get(Epoch.CONVERGING)
        change = record.get(Epoch.LOSS_CHANGE)
        if verdict is None:
            trend = "first epoch"
        else:
            trend = (f"{change:+.4g} vs previous epoch: "
                     f"{'converging' if verdict else 'NOT converging'}")
        evaluation = record.get(Epoch.EVAL) or {}
        results = "".join(f", {name} {fmt.number(value)}" for name, value in evaluation.items())
        self._line(f"epoch {record[Epoch.EPOCH]} done: mean loss "
                   f"{fmt.number(record.get(Epoch.LOSS_MEAN))} "
                   f"over {record.get(Epoch.STEPS)} steps ({trend})"
                   + (f"; evaluation: {results[2:]}" if results else ""))

    def close(self) -> None:
        if self._bar_shown:
            self.stream.write("\n")
            self._bar_shown = False
        self.stream.flush()


def _tokens(record: Mapping[str, Any]) -> str:
    """" | 12.3k tok/s MFU 41.2%" when the step record has them (``tokens_per_sample``)."""
    tokens = record.get(Step.TOKENS_PER_S)
    return f" | {fmt.token_rate(tokens, record.get(Step.MFU))}" if tokens is not None else ""


def _eta(record: Mapping[str, Any]) -> str:
    eta = record.get(Step.ETA_S)
    return "" if eta is None else f" | ETA {fmt.duration(eta)}"
