"""The host's side of state steps: which steps measure the model's state, and the ``state``
record's fields from the vector the state graph returned (state_probe.py)."""
from __future__ import annotations

import math
from typing import Any

import numpy as np

from ...records import LayerState, State
from ..reading.layers import LayerGrouping
from .host_state import host_state
from .state_probe import FIRST_MOMENT, GRAD, SECOND_MOMENT, UPDATE, WEIGHT, StateLayout

_LAYER_FIELDS = {WEIGHT: LayerState.WEIGHT_NORM, UPDATE: LayerState.UPDATE_NORM,
                 GRAD: LayerState.GRAD_NORM, FIRST_MOMENT: LayerState.M_NORM,
                 SECOND_MOMENT: LayerState.V_NORM}


class StateSteps:
    """``interval``: the ``state_interval`` setting (None: never)."""

    def __init__(self, interval: int | None):
        self.interval = interval
        self._grouping: tuple[tuple[str, ...], LayerGrouping] | None = None

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
        """``Monitor.observe_state``'s arguments: L2 norms over all parameters and per layer
        (a layer's parameters' squares summed in float64), each layer's update/weight."""
        values = vector.tolist() if hasattr(vector, "tolist") else list(vector)
        squares = {quantity: np.asarray(block, np.float64)
                   for quantity, block in layout.split(values).items()}
        grouping = self._layers(layout.names)
        per_quantity = {quantity: grouping.norms(block) for quantity, block in squares.items()}
        layers: dict[str, dict[str, float | None]] = {}
        for layer in grouping.layers:
            # a quantity the vector lacks is null (host_state.py: no update, maybe no grads)
            entry: dict[str, float | None] = {LayerState.UPDATE_NORM: None,
                                              LayerState.GRAD_NORM: None}
            entry.update({_LAYER_FIELDS[quantity]: norms[layer]
                          for quantity, norms in per_quantity.items()})
            update = entry[LayerState.UPDATE_NORM]
            weight = entry[LayerState.WEIGHT_NORM]
            entry[LayerState.UPDATE_RATIO] = None if update is None or weight is None else \
                ratio(update, weight)
            layers[layer] = entry
        return {"step": step,
                State.WEIGHT_NORM: math.sqrt(float(squares[WEIGHT].sum())),
                State.UPDATE_NORM: math.sqrt(float(squares[UPDATE].sum()))
                if UPDATE in squares else None,
                State.LAYERS: layers}

    def _layers(self, names: tuple[str, ...]) -> LayerGrouping:
        if self._grouping is None or self._grouping[0] != names:
            self._grouping = (names, LayerGrouping(list(names)))
        return self._grouping[1]


def ratio(update: float, weight: float) -> float:
    """``update / weight``; a weight of zero norm (a freshly zeroed bias) has ratio 0 when
    nothing moved it, else inf."""
    if weight > 0 or not math.isfinite(weight):
        return update / weight
    return 0.0 if update == 0 else math.inf
