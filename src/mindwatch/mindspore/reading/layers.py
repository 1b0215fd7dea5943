"""Per-layer gradient norms from the per-parameter squared norms the train step returns."""
from __future__ import annotations

import numpy as np


def layer_of(parameter_name: str) -> str:
    """``blocks.0.attn.qkv.weight`` -> ``blocks.0.attn.qkv``; a bare name is its own layer."""
    return parameter_name.rsplit(".", 1)[0] if "." in parameter_name else parameter_name


class LayerGrouping:
    def __init__(self, parameter_names: list[str]):
        self.layers: list[str] = []
        index: dict[str, int] = {}
        self._members = np.empty(len(parameter_names), dtype=np.int64)
        for position, name in enumerate(parameter_names):
            layer = layer_of(name)
            if layer not in index:
                index[layer] = len(self.layers)
                self.layers.append(layer)
            self._members[position] = index[layer]

    def norms(self, squared: np.ndarray) -> dict[str, float]:
        """Layer name -> L2 norm of all its gradients (float64 sums of float32 squares)."""
        sums = np.zeros(len(self.layers))
        np.add.at(sums, self._members, np.asarray(squared, dtype=np.float64).reshape(-1))
        return {layer: float(value)
                for layer, value in zip(self.layers, np.sqrt(sums), strict=True)}
