"""What a trainer's callback does once mindwatch has stopped training, the same under Hugging
Face's Trainer and Lightning: the trainer writes its own checkpoint of the step when the stop
asks for one (the resume advice names it: checkpoints/resume.py), and under
``stop_exit_code`` the process exits with its status once the trainer has ended, the
callbacks after mindwatch's included (decisions/exit_status.py)."""
from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from traceback import print_exc
from typing import Any

from ...anomaly import Anomaly
from ...decisions.exit_status import exit_after, stop_exit_status


def asks_checkpoint(found: Sequence[Anomaly]) -> bool:
    """Whether the step's stop asks for a checkpoint (``found``: the step's anomalies and
    the stop): a ``checkpoint_and_stop`` anomaly of this rank, a signal under ``on_signal``
    "checkpoint_and_stop", or another rank's stop, whose ``peer_stop`` carries the actions
    that rank's policy gives. So every rank answers alike, by policy, not by whether its
    own file was written: a trainer's checkpoint is written by all ranks together (a barrier
    under Lightning's DDP, a collective under FSDP or DeepSpeed), and one rank's absence
    would hang the others."""
    return any(anomaly.stops and "checkpoint" in anomaly.actions for anomaly in found)


def later(callbacks: Sequence[Any], own: Any) -> list[Any]:
    """The callbacks after ``own`` in the trainer's list (none when it is not there)."""
    return next((list(callbacks[i + 1:]) for i, cb in enumerate(callbacks) if cb is own), [])


def exit_once_ended(code: int | None, stop: Anomaly | None, rank: int,
                    ends: Sequence[Callable[[], Any]]) -> None:
    """``SystemExit`` with the status ``stop`` gets under ``code``, after ``ends``: the
    endings of the callbacks after mindwatch's, which the trainer calls in order and the
    ``SystemExit`` would skip (a tracker's flush, a user's final save). Each runs once; one
    that fails is printed and the others still run, since the process exits anyway.
    Returns at once, running nothing, when there is no status to exit with."""
    if stop_exit_status(code, stop) is None:
        return
    for end in ends:
        try:
            end()
        except Exception:
            print_exc(file=sys.stderr)
    exit_after(code, stop, rank)
