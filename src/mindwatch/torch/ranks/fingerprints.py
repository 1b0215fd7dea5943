"""Fingerprints of a replica: the float32 sum and sum of squares of every parameter and
optimizer-state tensor, computed on the device, read as one vector (8 bytes a tensor).
Replicas that train in lockstep hold bit-identical tensors and get the same sums; the core
compares them exactly (ranks/replicas.py)."""
from __future__ import annotations

import numpy as np
import torch

from ..checkpoints.training_state import TrainingState


class Fingerprinter:
    """``Fingerprinter(state).vector()``: two numbers per tensor, in ``names`` order."""

    def __init__(self, state: TrainingState):
        self.state = state
        self.names = tuple(name for name, _ in self._tensors())

    def _tensors(self) -> list[tuple[str, torch.Tensor]]:
        model = self.state.model
        names = {id(p): n for n, p in model.named_parameters()} if model is not None else {}
        out = []
        state = self.state.optimizer.state if self.state.optimizer is not None else {}
        for index, param in enumerate(self.state.parameters()):
            name = names.get(id(param), f"param.{index}")
            out.append((name, param))
            for key, value in sorted(state.get(param, {}).items()):
                if isinstance(value, torch.Tensor):
                    out.append((f"{name}.{key}", value))
        return out

    def vector(self) -> np.ndarray:
        tensors = self._tensors()
        if tuple(name for name, _ in tensors) != self.names:   # state created since
            self.names = tuple(name for name, _ in tensors)
        with torch.no_grad():
            sums = []
            for _, tensor in tensors:
                values = tensor.detach().float().reshape(-1)
                sums.append(torch.stack((values.sum(), (values * values).sum())).cpu())
        return torch.cat(sums).numpy() if sums else np.zeros(0, np.float32)
