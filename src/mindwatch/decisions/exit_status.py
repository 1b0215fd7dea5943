"""``stop_exit_code``: the status a process exits with after mindwatch stopped its training,
the same rule in every adapter and trainer (each raises the ``SystemExit`` where its framework
has finished its own ending: MindSpore's callbacks, Hugging Face's and Lightning's train end, a
plain loop's ``close``)."""
from __future__ import annotations

import signal
import sys
from collections.abc import Callable, Sequence
from traceback import print_exc
from typing import Any

from ..anomaly import PEER_STOP, SIGNAL_STOP, SINK_ERROR, USER_STOP, Anomaly


def stop_exit_status(code: int | None, stop: Anomaly | None) -> int | None:
    """The exit status after a stop under ``stop_exit_code`` (None: exit as the script does).
    An anomaly's stop, this rank's or another's: ``code``. A signal's: 128 + its number, as
    the signal itself ends a process (another rank's: SIGTERM's; the ranks share only that a
    signal stopped the run), so a scheduler still restarts a preempted job. A
    ``request_stop()`` (EarlyStopping) or another rank's sink failure: None, no fault of the
    training."""
    if code is None or stop is None:
        return None
    kind = stop.origin[1] if stop.kind == PEER_STOP and stop.origin else stop.kind
    if kind == SIGNAL_STOP:
        signum = stop.value if stop.kind == SIGNAL_STOP else None
        return 128 + (int(signum) if signum is not None else int(signal.SIGTERM))
    return None if kind in (USER_STOP, SINK_ERROR) else code


def _stopped_by(stop: Anomaly) -> str:
    if stop.kind == PEER_STOP and stop.origin is not None:
        return f"rank {stop.origin[0]}'s {stop.origin[1]} at step {stop.step}"
    return f"{stop.kind} at step {stop.step}"


def stopped_by(stop: Anomaly) -> str:
    """What stopped the run, for the exit line (another rank's stop names that rank)."""
    if stop.kind == PEER_STOP and stop.origin is not None:
        return f"rank {stop.origin[0]}'s {stop.origin[1]} at step {stop.step}"
    return f"{stop.kind} at step {stop.step}"


def exit_message(stop: Anomaly, status: int, rank: int) -> str:
    return (f"mindwatch [rank {rank}]: training stopped by {stopped_by(stop)}; exiting with "
            f"status {status} (stop_exit_code)")


def exit_after(code: int | None, stop: Anomaly | None, rank: int,
               ends: Sequence[Callable[[], Any]] = ()) -> None:
    """Raises ``SystemExit`` with the status ``stop`` gets under ``code``, after saying so on
    stderr; returns when there is none (no stop, no ``stop_exit_code``, or a stop that is no
    fault of the training), running nothing. ``ends``: the endings of the callbacks after
    mindwatch's, which the framework calls in order and the ``SystemExit`` would skip (a
    checkpoint's last save, a tracker's flush), run first, each once; one that fails is
    printed and the others still run, since the process exits anyway."""
    status = stop_exit_status(code, stop)
    if stop is None or status is None:
        return
    for end in ends:
        try:
            end()
        except Exception:
            print_exc(file=sys.stderr)
    print(exit_message(stop, status, rank), file=sys.stderr, flush=True)
    raise SystemExit(status)


def after_own(callbacks: Sequence[Any], own: Any) -> list[Any]:
    """The callbacks after ``own`` in a framework's list (none when it is not there)."""
    return next((list(callbacks[i + 1:]) for i, cb in enumerate(callbacks) if cb is own), [])
