"""A withheld step computed once more: was it the data or the device?

A step whose update was withheld (non-finite values, an explosion, a spike under "skip") is
computed again on the same batch and the same weights before the next step, through the
framework's ``replay`` hook (the train step's ordinary graph, its update withheld whatever
it finds: no compile, and nothing at all on the steps that were not withheld). Then:

- bit-identical loss and gradient norm: the computation is deterministic and the batch or the
  model's state is the cause; the step's anomalies say so (``replay_verdict``), naming the
  batch's place in its epoch, and the policy goes on as for any anomaly;
- healthy (within every bound the update was held to): the first result came from elsewhere,
  a transient fault of this device (silent data corruption, a flaky link), anomaly
  ``transient_fault`` naming rank, host and device; the update stays withheld;
- different but anomalous again: the same batch fails again, so the data or the model is
  the likely cause; not bit-identically, because the step is not deterministic (dropout,
  multi-threaded CPU reductions: measured on this CPU in a few of faults.py's withheld steps).

Under data parallelism every rank withholds the same steps (the verdict is shared in the
graph), so every rank replays them and the replay's collectives pair up.

The verdict is one sentence in the ``replay_verdict`` field of each of the step's anomalies
(not appended to each message): every record, report and alert of the step still carries
it, and a view that shows the step's anomalies as one event (``mindwatch.events``) says it
once.
"""
from __future__ import annotations

import math
import socket
from collections.abc import Callable, Mapping
from typing import Any

from .. import records
from ..anomaly import TRANSIENT_FAULT, Anomaly
from ..basics import format as fmt
from ..observation import ReplayOutcome, StepObservation
from ..records import Anomaly as AnomalyRecord
from ..records import FrameworkMemory, Hardware, Replay


def same(first: float | None, again: float | None) -> bool:
    """Bit-identical as float32 values are: NaN matches NaN."""
    if first is None or again is None:
        return first is again
    return first == again or (math.isnan(first) and math.isnan(again))


def device_shown(device: int | None, hardware: Mapping[str, Any] | None) -> int | None:
    """The device index to name for this process: ``device`` (its local rank, the index a
    launcher gives it), unless the latest hardware sample (``hardware``, a ``hardware``
    record; None: none taken yet, nothing known) shows no device: its framework trains on
    the CPU (``framework_memory.device_target``), or, without that, it lists no device.
    A CPU-only run has no device 1 to blame."""
    if hardware is None:
        return device
    memory = hardware.get(Hardware.FRAMEWORK_MEMORY)
    target = memory.get(FrameworkMemory.DEVICE_TARGET) if isinstance(memory, Mapping) else None
    if target is not None:
        return None if str(target).upper() == "CPU" else device
    return device if hardware.get(Hardware.DEVICES) else None


def place_text(host: str | None, device: int | None) -> str:
    """"host node-a, device 3", or "host node-a" for a process with no device."""
    return f"host {host or 'unknown'}" + ("" if device is None else f", device {device}")


class Replays:
    """``replay``: the framework's hook (None: this set-up cannot replay); ``emit(kind,
    fields)``: the record writer's; ``rank`` and ``device`` (the local rank, the device
    index a launcher gives it) name this process in a ``transient_fault``; ``hardware``:
    the latest hardware record (None before the first), which tells whether there is a
    device at all (``device_shown``)."""

    def __init__(self, *, replay: Callable[[], ReplayOutcome | None] | None,
                 emit: Callable[[str, dict[str, Any]], Any], rank: int, device: int | None,
                 hardware: Callable[[], Mapping[str, Any] | None] | None = None):
        self._replay, self._emit, self._rank = replay, emit, rank
        self._host, self._device, self._hardware = socket.gethostname(), device, hardware
        self._epoch: int | None = None
        self._epoch_first_step = 1
        self._last: dict[str, Any] | None = None       # the latest replay record's fields

    def replayed(self, step: int) -> dict[str, Any] | None:
        """The replay record of ``step``, when that step was computed again."""
        last = self._last
        return last if last is not None and last[Replay.STEP] == step else None

    @property
    def _place(self) -> tuple[str, int | None]:
        latest = self._hardware() if self._hardware is not None else None
        return self._host, device_shown(self._device, latest)

    def review(self, obs: StepObservation, found: list[Anomaly]) -> list[Anomaly]:
        if obs.epoch != self._epoch:
            self._epoch, self._epoch_first_step = obs.epoch, obs.step - obs.steps + 1
        if not obs.skipped or self._replay is None:
            return found
        outcome = self._replay()
        if outcome is None:
            return found
        first_loss, first_norm = _number(obs.loss), _number(obs.grad_norm)
        reproduced = same(first_loss, outcome.loss) and same(first_norm, outcome.grad_norm)
        self._last = {
            Replay.STEP: obs.step, Replay.ANOMALY: found[0].kind if found else None,
            Replay.REPRODUCED: reproduced, Replay.LOSS: first_loss,
            Replay.GRAD_NORM: first_norm, Replay.REPLAY_LOSS: outcome.loss,
            Replay.REPLAY_GRAD_NORM: outcome.grad_norm, Replay.HEALTHY: outcome.healthy}
        self._emit(records.REPLAY, dict(self._last))
        numbers = (f"loss {fmt.number(first_loss)} then {fmt.number(outcome.loss)}, gradient "
                   f"norm {fmt.number(first_norm)} then {fmt.number(outcome.grad_norm)}")
        # the framework's own step within the epoch where it gives one (a resumed
        # MindFormers run starts counting mid-epoch), else counted from the epoch's start
        epoch_step = obs.epoch_step if obs.epoch_step is not None else \
            obs.step - self._epoch_first_step + 1
        where = f"step {epoch_step} of epoch {obs.epoch}" if obs.epoch is not None \
            else f"step {obs.step}"
        if reproduced:
            verdict = (f"computed again on the same batch and weights it came out "
                       f"bit-identical: the batch ({where}) or the model's state is the cause, "
                       f"not the device")
        elif outcome.healthy:
            verdict = (f"computed again on the same batch and weights it came out healthy "
                       f"({numbers}): see transient_fault")
            # the rank whose own gradients went bad (origin_rank), else this one
            origin = next((a for a in found if a.origin_rank is not None), None)
            rank, place = (self._rank, self._place) if origin is None else (
                origin.origin_rank, origin.origin_place or (None, None))
            found.append(Anomaly(
                TRANSIENT_FAULT, obs.step, outcome.grad_norm, None,
                f"step {obs.step} computed again on the same batch and the same weights came "
                f"out healthy ({numbers}): a transient fault on rank {rank} "
                f"({place_text(*place)}) is likely (silent data corruption or a flaky link); "
                "the update stays withheld", origin_rank=rank, origin_place=place))
        else:
            verdict = (f"computed again on the same batch and weights it failed again, "
                       f"though not bit-identically ({numbers}: dropout, or kernels that are "
                       f"not deterministic here): the batch ({where}) or the model's state is "
                       "the likely cause, not a transient fault")
        for anomaly in found:
            if anomaly.kind != TRANSIENT_FAULT:
                anomaly.fields[AnomalyRecord.REPLAY_VERDICT] = verdict
        return found


def _number(value: Any) -> float | None:
    try:
        return None if value is None else float(value)
    except (TypeError, ValueError):
        return None
