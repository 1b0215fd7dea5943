"""State records coming in (inside the model, every ``state_interval`` steps): the ``state``
record written, then the detectors that read a model's state, then their findings acted on,
on the training thread, at that step's end."""
from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from .. import records
from ..anomaly import Anomaly
from ..detectors import Detector
from ..records import State
from .writer import RecordWriter


class StateInput:
    """``act``: what carries out the findings (``decisions.Actions.act``)."""

    def __init__(self, *, detectors: Sequence[Detector], writer: RecordWriter,
                 act: Callable[[list[Anomaly]], None]):
        self._detectors, self._writer, self._act = detectors, writer, act

    def observe(self, *, step: int, weight_norm: float, update_norm: float,
                layers: Mapping[str, Mapping[str, float]],
                activations: Mapping[str, Mapping[str, float]] | None = None
                ) -> list[Anomaly]:
        fields: dict[str, Any] = {State.STEP: step, State.WEIGHT_NORM: weight_norm,
                                  State.UPDATE_NORM: update_norm,
                                  State.LAYERS: {name: dict(entry)
                                                 for name, entry in layers.items()}}
        if activations:
            fields[State.ACTIVATIONS] = {name: dict(entry)
                                         for name, entry in activations.items()}
        self._writer.emit(records.STATE, fields)
        found = [anomaly for detector in self._detectors
                 for anomaly in detector.update_state(step, layers, activations)]
        self._act(found)
        return found
