"""The hang watchdog: a daemon thread that notices when no training step has ended for too
long, while the step is still stuck (a collective one rank never joins, a data loader that
blocks, a stalled mount), instead of after the launcher's 30-minute collective timeout.

Cost on the training thread: ``beat`` at each step end replaces one tuple and appends one
float to a bounded deque; no lock. The watchdog thread reads the tuple whole, so it never
sees a step number from one beat with the time of another.

The timeout in force (``timeout_in_force``): ``hang_timeout_s`` seconds, or automatically
max(``MIN_AUTO_TIMEOUT_S``, ``AUTO_MEDIAN_FACTOR`` x the median time between step ends over
the last ``INTERVAL_WINDOW`` ones); until the first step of a segment ends (graph
compilation, dataset start-up) ``FIRST_STEP_FACTOR`` times that, and in the ranks' start-up
exchange ``EXCHANGE_FACTOR`` times.
"""
from __future__ import annotations

import statistics
import sys
import threading
import weakref
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ..basics.clock import Clock

MIN_AUTO_TIMEOUT_S = 600.0
AUTO_MEDIAN_FACTOR = 20.0
# The first step compiles the graph: minutes on Ascend for a large model, seconds on a CPU.
FIRST_STEP_FACTOR = 6.0
# The ranks' start-up exchange is a collective (no compilation): the ranks that reached it
# wait for one that never starts, found at twice the timeout rather than six times (the
# ranks arrive a few seconds apart, after building their models and data).
EXCHANGE_FACTOR = 2.0
INTERVAL_WINDOW = 100
# The thread looks every timeout / TICKS_PER_TIMEOUT seconds, within these bounds: a report
# comes at most 5% (and 5 s) late, and a 600 s timeout costs one wake-up every 5 s.
TICKS_PER_TIMEOUT = 20
MIN_TICK_S, MAX_TICK_S = 0.01, 5.0
JOIN_TIMEOUT_S = 1.0


def auto_timeout(intervals: Sequence[float]) -> float:
    """max(600 s, 20 x the median of ``intervals``, the seconds between step ends)."""
    if not intervals:
        return MIN_AUTO_TIMEOUT_S
    return max(MIN_AUTO_TIMEOUT_S, AUTO_MEDIAN_FACTOR * statistics.median(intervals))


def timeout_in_force(setting: float | None, intervals: Sequence[float], *,
                     first_step: bool, exchanging: bool = False) -> float:
    """Seconds without a step end before a hang: ``setting`` (None: ``auto_timeout``), times
    ``FIRST_STEP_FACTOR`` while the segment's first step has not ended, ``EXCHANGE_FACTOR``
    while the ranks' start-up exchange goes on."""
    base = auto_timeout(intervals) if setting is None else float(setting)
    return base * (EXCHANGE_FACTOR if exchanging else FIRST_STEP_FACTOR if first_step else 1)


@dataclass(frozen=True)
class Stall:
    """What the watchdog found: no step ended for ``stalled_s`` >= ``timeout_s`` seconds."""

    step: int                 # the last step that ended (0: none yet in this segment)
    since: float              # monotonic time it ended (or the segment began)
    stalled_s: float
    timeout_s: float
    thread_id: int            # the training thread: the one that last ended a step
    generation: int           # which run segment's watch found it


class HangWatchdog:
    """One per ``Monitor``: ``start`` with each run segment, ``beat`` at each step end,
    ``stop`` at ``close``. ``on_hang(stall)`` runs on the watchdog thread, once per stall (a
    stall that goes on is not reported again; one after steps resumed is). ``check`` does
    one look on the caller's thread (tests drive it with a fake clock)."""

    def __init__(self, *, timeout_s: float | None, clock: Clock,
                 on_hang: Callable[[Stall], None]):
        self.timeout_s, self.clock = timeout_s, clock
        # The owner's bound method (HangGuard's, hence the monitor's) is held weakly: a
        # monitor nobody closed and nobody holds any more (a custom loop that forgot close())
        # must not keep a thread that reports its "hang" forever. The thread ends at its next
        # look once the monitor is gone.
        self._on_hang: Callable[[], Callable[[Stall], None] | None] = (
            weakref.WeakMethod(on_hang) if hasattr(on_hang, "__self__")
            else lambda: on_hang)
        # Between step ends, across segments: a resumed segment keeps the step pace.
        self.intervals: deque[float] = deque(maxlen=INTERVAL_WINDOW)
        # (monotonic time of the latest step end or segment start, its step, the thread,
        # whether a step ended in this segment): replaced whole by each beat.
        self._last: tuple[float, int, int, bool] = (clock.perf_counter(), 0,
                                                    threading.get_ident(), False)
        self._reported: float | None = None      # ``_last[0]`` of the stall reported
        # In the ranks' start-up exchange: a collective, no compilation (EXCHANGE_FACTOR).
        self.exchanging = False
        self.generation = 0
        self._stopped = threading.Event()
        self._stopped.set()
        self._thread: threading.Thread | None = None

    @property
    def running(self) -> bool:
        return not self._stopped.is_set()

    def start(self, step: int = 0) -> None:
        """Watch a new segment from now on, its first step with the first-step allowance;
        ``step``: the last step before it. The calling thread is the training thread."""
        self.stop()
        self.generation += 1
        self._last = (self.clock.perf_counter(), step, threading.get_ident(), False)
        self._reported = None
        self._stopped = stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(stopped,), daemon=True,
                                        name=f"mindwatch-hang-watchdog-{self.generation}")
        self._thread.start()

    def beat(self, now: float, step: int) -> None:
        """A step ended at ``now`` (the monitor's monotonic clock)."""
        previous, _, _, stepped = self._last
        if stepped:                     # the first interval of a segment is compilation
            self.intervals.append(now - previous)
        self._last = (now, step, threading.get_ident(), True)

    def progress(self, now: float) -> None:
        """Something other than a step made progress at ``now`` (an evaluation batch): no
        hang while it goes on, and no interval for the step pace (an evaluation's length says
        nothing about a training step's)."""
        _, step, thread_id, stepped = self._last
        self._last = (now, step, thread_id, stepped)

    def timeout(self) -> float:
        """The timeout in force now."""
        return timeout_in_force(self.timeout_s, self.intervals, first_step=not self._last[3],
                                exchanging=self.exchanging)

    def check(self, now: float | None = None) -> Stall | None:
        """A stall not reported yet, if no step ended for the timeout in force."""
        last, step, thread_id, stepped = self._last
        now = self.clock.perf_counter() if now is None else now
        timeout = timeout_in_force(self.timeout_s, self.intervals, first_step=not stepped,
                                   exchanging=self.exchanging)
        stalled = now - last
        if stalled < timeout or self._reported == last:
            return None
        self._reported = last
        return Stall(step=step, since=last, stalled_s=stalled, timeout_s=timeout,
                     thread_id=thread_id, generation=self.generation)

    def stop(self) -> None:
        """No report after this returns (``on_hang`` checks ``is_current``); the thread ends
        at its next look, waited for at most ``JOIN_TIMEOUT_S``."""
        self._stopped.set()
        thread, self._thread = self._thread, None
        if thread is not None and thread is not threading.current_thread():
            thread.join(JOIN_TIMEOUT_S)

    def is_current(self, stall: Stall) -> bool:
        """``stall`` goes on: no step ended since, the segment is still watched."""
        return (self.running and stall.generation == self.generation
                and self._last[0] == stall.since)

    def _run(self, stopped: threading.Event) -> None:
        said = False
        while not stopped.wait(min(max(self.timeout() / TICKS_PER_TIMEOUT, MIN_TICK_S),
                                   MAX_TICK_S)):
            try:
                if not self._look(stopped):
                    return               # its monitor was collected without a close()
            except Exception as exc:     # the watch goes on; said once, where it can be read
                if not said:
                    said = True
                    print(f"mindwatch: the hang watchdog could not report a stall "
                          f"({type(exc).__name__}: {exc})", file=sys.stderr, flush=True)

    def _look(self, stopped: threading.Event) -> bool:
        """One look; False once the monitor is gone. The strong reference to the monitor
        lives only in this call, never across the wait."""
        on_hang = self._on_hang()
        if on_hang is None:
            stopped.set()
            return False
        stall = self.check()
        if stall is not None and not stopped.is_set():
            on_hang(stall)
        return True
