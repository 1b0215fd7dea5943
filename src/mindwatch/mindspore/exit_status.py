"""``stop_exit_code``: the process exits with a status of its own after mindwatch stopped
training (docs/mindformers.md#making-the-job-fail-when-mindwatch-stops-it), once the run is
complete on disk."""
from __future__ import annotations

from functools import partial
from typing import Any

from ..anomaly import Anomaly
from ..decisions.exit_status import after_own, exit_after, stop_exit_status


def exit_after_stop(monitor: Any, run_context: Any, code: int | None, stop: Anomaly | None,
                    rank: int) -> None:
    """Raises ``SystemExit`` with the status ``stop`` gets under ``code`` (none: returns).
    The callbacks after ``monitor`` in ``Model.train``'s list end first, each once:
    MindSpore calls their ``on_train_end`` in order, and a SystemExit from ``monitor``'s
    would skip theirs (a ModelCheckpoint's last save, a SummaryCollector's flush)."""
    # no exit, no look at the callback list: a bare RunContext's parameters raise KeyError
    # for a name they lack
    if stop_exit_status(code, stop) is None:
        return
    callbacks = list(getattr(run_context.original_args(), "list_callback", None) or ())
    exit_after(code, stop, rank, [partial(callback.on_train_end, run_context)
                                  for callback in after_own(callbacks, monitor)])
