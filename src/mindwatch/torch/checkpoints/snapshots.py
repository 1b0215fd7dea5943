"""Host-memory snapshots of the whole training state, for ``on_anomaly="rewind"``: the
model's (or the optimizer's) parameters, the optimizer's state with its step counts and
``param_groups`` (the LR too), and each LR scheduler's state, copied to the CPU.

A restore loads the copies back through ``load_state_dict`` (which copies into the live
tensors): bit for bit. Cost (``benchmarks/torch_overhead.py``): one device-to-host copy of the
state per snapshot (a read to the host, on snapshot steps only), and ``snapshots_kept`` copies
held in host memory (with AdamW about 3x the weights' bytes each).
"""
from __future__ import annotations

import copy
from typing import Any

import torch

from .training_state import TrainingState


class TrainStateSnapshots:
    """A ``rewinding.SnapshotStore`` over a ``TrainingState``."""

    def __init__(self, state: TrainingState):
        self._state = state
        self._copies: dict[int, dict[str, Any]] = {}

    def take(self, step: int) -> int:
        held = [0]

        def to_host(value: Any) -> Any:
            if isinstance(value, torch.Tensor):
                host = value.detach().to("cpu", copy=True)
                held[0] += host.numel() * host.element_size()
                return host
            return copy.deepcopy(value)

        self._copies[step] = _map(self._state.state_dicts(), to_host)
        return held[0]

    def restore(self, step: int) -> None:
        # load_state_dict may keep the objects it is given: a copy, for the next rewind
        self._state.load_state_dicts(_map(self._copies[step], _clone))

    def drop(self, step: int) -> None:
        self._copies.pop(step, None)


def _clone(value: Any) -> Any:
    return value.clone() if isinstance(value, torch.Tensor) else copy.deepcopy(value)


def _map(value: Any, leaf: Any) -> Any:
    if isinstance(value, dict):
        return type(value)((key, _map(item, leaf)) for key, item in value.items()) \
            if not hasattr(value, "_metadata") else _with_metadata(value, leaf)
    if isinstance(value, (list, tuple)):
        return type(value)(_map(item, leaf) for item in value)
    return leaf(value)


def _with_metadata(value: Any, leaf: Any) -> Any:
    """A module state_dict (an OrderedDict with ``_metadata``), its metadata kept."""
    mapped = type(value)((key, _map(item, leaf)) for key, item in value.items())
    mapped._metadata = copy.deepcopy(value._metadata)
    return mapped
