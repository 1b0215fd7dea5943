"""What a trainer's callback does once mindwatch has stopped training, the same under Hugging
Face's Trainer and Lightning: the trainer writes its own checkpoint of the step when the stop
asks for one (the resume advice names it: checkpoints/resume.py). Under ``stop_exit_code``
the process then exits once the trainer has ended, the callbacks after mindwatch's included
(``decisions.exit_status.exit_after``, as under MindSpore)."""
from __future__ import annotations

from collections.abc import Sequence

from ...anomaly import Anomaly


def asks_checkpoint(found: Sequence[Anomaly]) -> bool:
    """Whether the step's stop asks for a checkpoint (``found``: the step's anomalies and
    the stop): a ``checkpoint_and_stop`` anomaly of this rank, a signal under ``on_signal``
    "checkpoint_and_stop", or another rank's stop, whose ``peer_stop`` carries the actions
    that rank's policy gives. So every rank answers alike, by policy, not by whether its
    own file was written: a trainer's checkpoint is written by all ranks together (a barrier
    under Lightning's DDP, a collective under FSDP or DeepSpeed), and one rank's absence
    would hang the others."""
    return any(anomaly.stops and "checkpoint" in anomaly.actions for anomaly in found)

