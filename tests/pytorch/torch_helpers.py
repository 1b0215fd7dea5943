"""Shared by the PyTorch adapter's tests: a small model, its data, a plain loop with and
without mindwatch, and a counter of the values read to the host."""
from __future__ import annotations

import json
from pathlib import Path

import torch
from torch import nn
from torch.overrides import TorchFunctionMode

# Tensor methods that hand a value to Python: on an accelerator each waits for the device.
HOST_READS = frozenset({
    torch.Tensor.item, torch.Tensor.tolist, torch.Tensor.__bool__, torch.Tensor.__float__,
    torch.Tensor.__int__, torch.Tensor.__index__, torch.Tensor.numpy, torch.Tensor.nonzero,
    torch.equal, torch.is_nonzero, torch.Tensor.__format__})


class HostReads(TorchFunctionMode):
    """Counts the reads to the host made while it is active (``with HostReads() as reads``)."""

    def __init__(self):
        super().__init__()
        self.count = 0
        self.names: list[str] = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if func in HOST_READS:
            self.count += 1
            self.names.append(getattr(func, "__name__", str(func)))
        return func(*args, **(kwargs or {}))


def tiny_model(seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(8, 16), nn.LayerNorm(16), nn.ReLU(), nn.Linear(16, 1))


def batches(steps: int, seed: int = 1) -> list[tuple[torch.Tensor, torch.Tensor]]:
    generator = torch.Generator().manual_seed(seed)
    return [(torch.randn(16, 8, generator=generator), torch.randn(16, 1, generator=generator))
            for _ in range(steps)]


def records(log_dir, kind: str | None = None, rank: int = 0) -> list[dict]:
    lines = (Path(log_dir) / f"rank_{rank}.jsonl").read_text().splitlines()
    out = [json.loads(line) for line in lines]
    return [r for r in out if kind is None or r["kind"] == kind]


def snapshot(model: nn.Module, optimizer: torch.optim.Optimizer) -> dict:
    """Every parameter and optimizer state value, copied (tensors cloned)."""
    return {
        "params": [p.detach().clone() for p in model.parameters()],
        "state": {i: {k: v.clone() if isinstance(v, torch.Tensor) else v
                      for k, v in optimizer.state[p].items()}
                  for i, p in enumerate(model.parameters()) if p in optimizer.state},
        "groups": [{k: v for k, v in g.items() if k != "params"}
                   for g in optimizer.param_groups]}


def bitwise_equal(a: dict, b: dict) -> bool:
    """Same keys, and every tensor the same bytes (NaN included), every number equal."""
    def same(x, y):
        if isinstance(x, torch.Tensor):
            return (isinstance(y, torch.Tensor) and x.dtype == y.dtype and x.shape == y.shape
                    and torch.equal(x.view(-1).view(torch.uint8) if x.numel() else x,
                                    y.view(-1).view(torch.uint8) if y.numel() else y))
        if isinstance(x, dict):
            return isinstance(y, dict) and x.keys() == y.keys() and all(
                same(x[k], y[k]) for k in x)
        if isinstance(x, (list, tuple)):
            return len(x) == len(y) and all(same(i, j) for i, j in zip(x, y, strict=True))
        return x == y
    return same(a, b)
