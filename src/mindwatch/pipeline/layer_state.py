"""A ``state`` record's fields from squared norms, framework-free: each adapter measures, per
trained parameter, the squared L2 norms of its weight, of the update a step applied, of its
gradient and of the optimizer's moments (MindSpore in a second graph, PyTorch from the
tensors), and hands them here as one flat vector laid out by ``StateLayout``; the norms are
summed per layer (a parameter name without its last part) in float64.

numpy is imported where used: the views import this package and need none.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from ..records import LayerState, State

WEIGHT, UPDATE, GRAD, FIRST_MOMENT, SECOND_MOMENT = (
    "weight_norm", "update_norm", "grad_norm", "m_norm", "v_norm")
_LAYER_FIELDS = {WEIGHT: LayerState.WEIGHT_NORM, UPDATE: LayerState.UPDATE_NORM,
                 GRAD: LayerState.GRAD_NORM, FIRST_MOMENT: LayerState.M_NORM,
                 SECOND_MOMENT: LayerState.V_NORM}


@dataclass(frozen=True)
class StateLayout:
    """Which quantities the state vector holds, in order, and for which parameters."""

    names: tuple[str, ...]                # the trained parameters, in the optimizer's order
    quantities: tuple[str, ...]           # WEIGHT, UPDATE, GRAD, then the moments it has

    def split(self, vector: list[float]) -> dict[str, list[float]]:
        """Quantity -> one squared norm per parameter."""
        n = len(self.names)
        return {quantity: vector[i * n:(i + 1) * n]
                for i, quantity in enumerate(self.quantities)}


def layer_of(parameter_name: str) -> str:
    """``blocks.0.attn.qkv.weight`` -> ``blocks.0.attn.qkv``; a bare name is its own layer."""
    return parameter_name.rsplit(".", 1)[0] if "." in parameter_name else parameter_name


class LayerGrouping:
    """Parameters grouped into layers, for per-layer norms from per-parameter squares."""

    def __init__(self, parameter_names: list[str]):
        self.layers: list[str] = []
        index: dict[str, int] = {}
        self._members: list[int] = []
        for name in parameter_names:
            layer = layer_of(name)
            if layer not in index:
                index[layer] = len(self.layers)
                self.layers.append(layer)
            self._members.append(index[layer])

    def norms(self, squared: Any) -> dict[str, float]:
        """Layer name -> L2 norm of all its parameters' (float64 sums of float32 squares)."""
        import numpy as np

        sums = np.zeros(len(self.layers))
        np.add.at(sums, np.asarray(self._members, np.int64),
                  np.asarray(squared, dtype=np.float64).reshape(-1))
        return {layer: float(value)
                for layer, value in zip(self.layers, np.sqrt(sums), strict=True)}


class StateFields:
    """``Monitor.observe_state``'s arguments from a state vector, the layer grouping kept
    while the parameters stay the same."""

    def __init__(self) -> None:
        self._grouping: tuple[tuple[str, ...], LayerGrouping] | None = None

    def fields(self, step: int, layout: StateLayout, vector: Any) -> dict[str, Any]:
        """L2 norms over all parameters and per layer (a layer's parameters' squares summed
        in float64), each layer's update/weight; a quantity the vector lacks is null."""
        import numpy as np

        values = vector.tolist() if hasattr(vector, "tolist") else list(vector)
        squares = {quantity: np.asarray(block, np.float64)
                   for quantity, block in layout.split(values).items()}
        grouping = self._layers(layout.names)
        per_quantity = {quantity: grouping.norms(block) for quantity, block in squares.items()}
        layers: dict[str, dict[str, float | None]] = {}
        for layer in grouping.layers:
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
