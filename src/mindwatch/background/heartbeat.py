"""This rank's heartbeat (runlog/heartbeats.py's format): a daemon thread replaces
``heartbeats/rank_<R>.json`` every ``interval_s`` seconds with where the training thread is,
from the monitor's construction to its close, on every rank of a job of several.

Cost on the training thread: ``phase`` replaces one tuple (three times a step: before the
step, in it, in the exchange); no lock, no I/O. The thread reads the tuple whole and, when a
phase has lasted a full period, the training thread's stack (~50 us). At 4096 ranks and the
default period (an eighth of the hang timeout, at most 30 s) a shared file system sees ~140
small replacements a second; ``hang_timeout_s=60`` makes that ~550.

A write that fails (a full disk, a read-only mount) is said once; the beats go on trying,
since the job's answer to a hang reads them.
"""
from __future__ import annotations

import json
import os
import socket
import threading
import weakref
from collections.abc import Callable
from typing import Any

from .. import records
from ..basics.clock import Clock
from ..basics.run_dir import write_text_atomically
from ..decisions.hang_report import in_data_loader, stack_of, where_in
from ..runlog import heartbeats as hb
from .watchdog import MIN_AUTO_TIMEOUT_S

# An eighth of the hang timeout: a stalled rank's beat is at most that old when the watchdog
# of another rank fires, and a dead one is stale (3 periods) well before an answer is due.
PERIODS_PER_TIMEOUT = 8.0
MIN_INTERVAL_S, MAX_INTERVAL_S = 0.5, 30.0


def interval_for(timeout_s: float | None) -> float:
    """Seconds between beats for a hang timeout of ``timeout_s`` (None: automatic)."""
    timeout = MIN_AUTO_TIMEOUT_S if timeout_s is None else timeout_s
    return min(max(timeout / PERIODS_PER_TIMEOUT, MIN_INTERVAL_S), MAX_INTERVAL_S)


class Heartbeat:
    def __init__(self, *, log_dir: str, rank: int, device: int | None, clock: Clock,
                 interval_s: float, notice: Callable[[str], None]):
        self.log_dir, self.rank, self.interval_s = log_dir, rank, interval_s
        self.path = hb.beat_path(log_dir, rank)
        self._device, self._clock = device, clock
        # The owner's bound method is held weakly (as the hang watchdog holds its own): a
        # monitor nobody closed and nobody holds any more takes its heartbeat with it.
        self._notice: Callable[[], Callable[[str], None] | None] = (
            weakref.WeakMethod(notice) if hasattr(notice, "__self__") else lambda: notice)
        self._host, self._pid = socket.gethostname(), os.getpid()
        # (phase, step, since: Unix s, the thread that set it): replaced whole
        self._phase: tuple[str, int, float, int] = (
            hb.STARTING, 0, clock.time(), threading.get_ident())
        self._state: dict[str, Any] = {hb.STATE: hb.RUNNING}
        self._lock = threading.Lock()       # one write at a time: the thread's, a stall's
        self._said = False
        self._stopped = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """The first beat now (a rank that never gets further is seen), then every period;
        again after ``ended`` (a new run segment)."""
        if self._thread is not None and not self._stopped.is_set():
            return
        try:
            os.makedirs(hb.directory(self.log_dir), exist_ok=True)
        except OSError as exc:
            self._say(exc)
        self._state = {hb.STATE: hb.RUNNING}
        self.write()
        self._stopped = stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(stopped,), daemon=True,
                                        name=f"mindwatch-heartbeat-{self.rank}")
        self._thread.start()

    def phase(self, phase: str, step: int) -> None:
        """The training thread is now in ``phase`` of ``step`` (runlog/heartbeats.py)."""
        self._phase = (phase, step, self._clock.time(), threading.get_ident())

    @property
    def current(self) -> tuple[str, int]:
        phase, step, _, _ = self._phase
        return phase, step

    def stalled(self, where: str | None, data_loader: bool, report: str | None) -> None:
        """The hang watchdog fired: say so now, with where the training thread waits."""
        with self._lock:
            self._state = {hb.STATE: hb.STALLED, hb.WHERE: where, hb.DATA_LOADER: data_loader,
                           hb.REPORT: report}
        self.write()

    def resumed(self) -> None:
        """A step ended after a stall."""
        if self._state.get(hb.STATE) == hb.STALLED:
            self._state = {hb.STATE: hb.RUNNING}

    def ended(self, reason: str | None) -> None:
        """The last beat: the process ends (``reason``: the end record's), or its monitor
        closes; the thread stops."""
        self._stopped.set()
        with self._lock:
            self._state = {**self._state, hb.STATE: hb.ENDED,
                           hb.REASON: reason or records.COMPLETED}
        self.write()

    def write(self) -> None:
        phase, step, since, ident = self._phase
        now = self._clock.time()
        with self._lock:
            state = dict(self._state)
            if hb.WHERE not in state and now - since >= self.interval_s:
                stack = stack_of(ident)
                state[hb.WHERE] = where_in(stack)
                state[hb.DATA_LOADER] = in_data_loader(stack)
            beat = {hb.RANK: self.rank, hb.HOST: self._host, hb.DEVICE: self._device,
                    hb.PID: self._pid, hb.TIME: now, hb.INTERVAL_S: self.interval_s,
                    hb.PHASE: phase, hb.STEP: step, hb.SINCE: since, **state}
            try:
                write_text_atomically(self.path, json.dumps(beat))
            except OSError as exc:
                self._say(exc)

    def _say(self, exc: OSError) -> None:
        notice = self._notice()
        if not self._said and notice is not None:
            self._said = True
            notice(f"the heartbeat {self.path} cannot be written ({exc.strerror or exc}):"
                         " a hang's answer cannot say where this rank is")

    def _run(self, stopped: threading.Event) -> None:
        while not stopped.wait(self.interval_s):
            if self._notice() is None:      # its monitor is gone without a close()
                return
            try:
                self.write()
            except Exception:       # never take the process down; the next beat tries again
                continue
