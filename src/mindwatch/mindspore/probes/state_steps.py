"""The host's side of state steps: which steps measure the model's state, and the ``state``
record's fields from the vector the state graph returned (state_probe.py)."""
from __future__ import annotations

from typing import Any

from ...pipeline.layer_state import StateFields, StateLayout
from ...records import State
from .host_state import host_state


class StateSteps:
    """``interval``: the ``state_interval`` setting (None: never)."""

    def __init__(self, interval: int | None):
        self.interval = interval
        self._fields = StateFields()

    def due(self, step: int) -> bool:
        return self.interval is not None and step > 0 and step % self.interval == 0

    def read(self, step: int, cell: Any) -> dict[str, Any] | None:
        """The ``state`` fields of the step ``cell`` (a ``MonitoredTrainStep``) just ran, if
        it was a state step; its vector is taken, so it is read once."""
        if cell is None or cell.last_state is None:
            return None
        vector, cell.last_state = cell.last_state, None
        fields = self.fields(step, cell.state_layout, vector)
        if cell.probes:
            fields[State.ACTIVATIONS] = cell.probes.read()
        return fields

    def read_unwrapped(self, step: int, optimizer: Any, outputs: Any) -> dict[str, Any] | None:
        """The ``state`` fields at a state step of a train cell not built by ``wrap``
        (``outputs``: its ``StepOutputs``), measured from outside it (host_state.py); None
        on other steps or without an optimizer."""
        if not self.due(step) or optimizer is None:
            return None
        return self.fields(step, *host_state(optimizer, outputs.param_sq_norms))

    def fields(self, step: int, layout: StateLayout, vector: Any) -> dict[str, Any]:
        """``Monitor.observe_state``'s arguments (pipeline/layer_state.py)."""
        return self._fields.fields(step, layout, vector)
