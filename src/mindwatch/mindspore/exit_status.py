"""``stop_exit_code``: the process exits with a status of its own after mindwatch stopped
training (docs/mindformers.md#making-the-job-fail-when-mindwatch-stops-it), once the run is
complete on disk."""
from __future__ import annotations

import sys
from traceback import print_exc
from typing import Any

from ..anomaly import Anomaly
from ..decisions.exit_status import exit_message, stop_exit_status


def exit_after_stop(monitor: Any, run_context: Any, code: int | None, stop: Anomaly | None,
                    rank: int) -> None:
    """Raises ``SystemExit`` with the status ``stop`` gets under ``code`` (none: returns).
    The callbacks after ``monitor`` end first: a SystemExit from its ``on_train_end`` would
    skip theirs (a ModelCheckpoint's last save, a SummaryCollector's flush)."""
    status = stop_exit_status(code, stop)
    if stop is None or status is None:
        return
    _end_callbacks_after(monitor, run_context)
    print(exit_message(stop, status, rank), file=sys.stderr, flush=True)
    raise SystemExit(status)


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
