"""``stop_exit_code``: the process exits with a status of its own after mindwatch stopped
training (docs/mindformers.md#making-the-job-fail-when-mindwatch-stops-it), once the run is
complete on disk."""
from __future__ import annotations

import signal
import sys
from traceback import print_exc
from typing import Any

from ..anomaly import PEER_STOP, SIGNAL_STOP, SINK_ERROR, USER_STOP, Anomaly


def exit_after_stop(monitor: Any, run_context: Any, code: int | None, stop: Anomaly | None,
                    rank: int) -> None:
    """Raises ``SystemExit`` with the status ``stop`` gets under ``code`` (none: returns).
    The callbacks after ``monitor`` end first: a SystemExit from its ``on_train_end`` would
    skip theirs (a ModelCheckpoint's last save, a SummaryCollector's flush)."""
    status = stop_exit_status(code, stop)
    if stop is None or status is None:
        return
    _end_callbacks_after(monitor, run_context)
    print(f"mindwatch [rank {rank}]: training stopped by {_stopped_by(stop)}; exiting with "
          f"status {status} (stop_exit_code)", file=sys.stderr, flush=True)
    raise SystemExit(status)


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


def _end_callbacks_after(monitor: Any, run_context: Any) -> None:
    """``on_train_end`` of the callbacks after ``monitor`` in ``Model.train``'s list, which
    MindSpore calls in order and a ``SystemExit`` from ``monitor``'s would skip; each runs
    once. One that fails is printed and the others still end: the process exits anyway."""
    callbacks = list(getattr(run_context.original_args(), "list_callback", None) or ())
    later = next((callbacks[i + 1:] for i, cb in enumerate(callbacks) if cb is monitor), [])
    for callback in later:
        try:
            callback.on_train_end(run_context)
        except Exception:
            print_exc()
