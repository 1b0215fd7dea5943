"""SIGTERM and SIGINT during training become a clean stop at the end of the current step.

Schedulers (Slurm, Kubernetes, ModelArts) send SIGTERM some seconds before they kill a job.
Dying at once would lose the run's end and the last good weights, so the first signal only
sets a flag; the monitor acts on it at the next step end (checkpoint, ``end`` record with
reason ``"signal"``, every rank stops after the same step), and ``finish`` then lets the
signal take its usual course: the previous handler is put back and the signal delivered
again, so a default SIGTERM still ends the process with status 143 and SIGINT still raises
KeyboardInterrupt. A second signal before that exits at once, the same way.

Handlers can only be installed from the main thread (Python's rule); elsewhere nothing is
installed and the monitor says so once.
"""
from __future__ import annotations

import os
import signal
import threading
from types import FrameType
from typing import Any

HANDLED = (signal.SIGTERM, signal.SIGINT)


def signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


class SignalStop:
    """Installs handlers for ``signals`` between ``install`` and ``finish``.

    ``received`` is the first signal's number (None before). The handler does nothing but
    record it: a Python signal handler runs between bytecodes of the main thread, in the
    middle of whatever training code was running, so all real work waits for the step end.
    """

    def __init__(self, signals: tuple[int, ...] = HANDLED):
        self.signals = signals
        self.received: int | None = None
        self._previous: dict[int, Any] = {}

    @property
    def installed(self) -> bool:
        return bool(self._previous)

    def install(self) -> bool:
        """True when the handlers are in place (main thread only). Idempotent."""
        if self.installed:
            return True
        if threading.current_thread() is not threading.main_thread():
            return False
        self.received = None
        for signum in self.signals:
            self._previous[signum] = signal.getsignal(signum)
            signal.signal(signum, self._handle)
        return True

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if self.received is None:
            self.received = signum
            return
        # A second signal: the user (or the scheduler) will not wait for the step to end.
        previous = self._restore()
        _usual_course(signum, previous.get(signum), frame)

    def _restore(self) -> dict[int, Any]:
        previous, self._previous = self._previous, {}
        for signum, handler in previous.items():
            if signal.getsignal(signum) == self._handle:   # ours is still the one in place
                signal.signal(signum, handler if handler is not None else signal.SIG_DFL)
        return previous

    def finish(self) -> None:
        """Put the previous handlers back; if a signal was received, let it take its usual
        course now (the default SIGTERM action ends this process: exit status 143)."""
        previous = self._restore()
        signum, self.received = self.received, None
        if signum is not None:
            _usual_course(signum, previous.get(signum), None)


def _usual_course(signum: int, handler: Any, frame: FrameType | None) -> None:
    """What the signal would have done without us: the previous Python handler if there was
    one (chained, never lost: KeyboardInterrupt for a default SIGINT), nothing if it was
    ignored, else the default action, by sending the signal to this process again."""
    if handler == signal.SIG_IGN:
        return
    if callable(handler):
        handler(signum, frame)
    else:                          # SIG_DFL, or a handler installed outside Python
        os.kill(os.getpid(), signum)
