"""Withholding an optimizer's update on the device, for any ``torch.optim`` optimizer.

A ``torch.optim`` step updates the parameters and its state in place, with no way to make it
conditional on a device value without reading that value to the host. So the step runs
always, and the update is undone where it must be: before the step every tensor it may change
(each parameter with a gradient, each tensor of its optimizer state) is copied into a buffer
kept from step to step; after it, ``torch.where(apply, new, old)`` writes back, for each,
either the step's values or the copy, bit for bit. Nothing is read to the host.

What the device cannot select is settled on the host once ``observe`` has read the step's
verdict (the one read of a step), before the next step: state an optimizer creates at its
first step (removed again), state values held as Python numbers, tensors on another device
than the verdict (Adam's step counts stay on the CPU beside CUDA parameters unless
``capturable``), and state tensors the step replaced rather than updated in place.

Cost (``benchmarks/torch_overhead.py``): one more copy of the parameters and optimizer state
in memory (with AdamW, three times the weights' bytes), and two passes over them per step.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

# (the state dict holding it, its key) for a state entry; (None, parameter) for a parameter
Slot = tuple[dict | None, Any]


class Withholding:
    """The copies of one optimizer's step: ``before`` it, ``after`` it, ``settle`` once the
    host knows whether the update was applied."""

    def __init__(self) -> None:
        self._buffers: list[torch.Tensor] = []
        self._slots: list[Slot] = []
        self._tensors: list[torch.Tensor] = []
        self._optimizer: torch.optim.Optimizer | None = None
        self._fresh: list[torch.Tensor] = []            # parameters without state before
        self._numbers: list[tuple[dict, Any, Any]] = []  # state values that are no tensor
        self._keys: list[tuple[dict, frozenset]] = []    # each state's keys before the step
        self._deferred: list[int] = []                   # slots the device could not select

    def before(self, optimizer: torch.optim.Optimizer, params: Sequence[torch.Tensor]) -> None:
        state = optimizer.state
        slots: list[Slot] = []
        tensors: list[torch.Tensor] = []
        self._fresh, self._numbers, self._keys = [], [], []
        for param in params:
            slots.append((None, param))
            tensors.append(param)
            entries = state.get(param)
            if not entries:
                self._fresh.append(param)
                continue
            self._keys.append((entries, frozenset(entries)))
            for key, value in entries.items():
                if isinstance(value, torch.Tensor):
                    slots.append((entries, key))
                    tensors.append(value)
                else:
                    self._numbers.append((entries, key, value))
        if not _same_layout(self._buffers, tensors):
            self._buffers = [torch.empty_like(t, memory_format=torch.preserve_format)
                             for t in tensors]
        with torch.no_grad():
            torch._foreach_copy_(self._buffers, tensors)
        self._optimizer, self._slots, self._tensors = optimizer, slots, tensors

    def after(self, apply: torch.Tensor) -> None:
        """The step's values where ``apply``, the copies elsewhere; what the device cannot
        select waits for ``settle``."""
        self._deferred = []
        verdicts = {apply.device: apply}
        with torch.no_grad():
            for index, ((holder, key), before) in enumerate(zip(self._slots, self._tensors,
                                                                strict=True)):
                now = key if holder is None else holder.get(key)
                if now is not before or (now.device.type == "cpu"
                                         and apply.device.type != "cpu"):
                    self._deferred.append(index)
                    continue
                verdict = verdicts.get(now.device)
                if verdict is None:
                    verdict = verdicts[now.device] = apply.to(now.device, non_blocking=True)
                torch.where(verdict, now, self._buffers[index], out=now)

    def settle(self, applied: bool) -> None:
        """The host's part, once the verdict is read: after a withheld update, put back what
        the device could not."""
        optimizer, self._optimizer = self._optimizer, None
        if applied or optimizer is None:
            return
        with torch.no_grad():
            for index in self._deferred:
                holder, key = self._slots[index]
                target = self._tensors[index]
                target.copy_(self._buffers[index])
                if holder is not None:
                    holder[key] = target
        for entries, keys in self._keys:
            for key in set(entries) - keys:          # state the step added
                del entries[key]
        for entries, key, value in self._numbers:
            entries[key] = value
        for param in self._fresh:                    # no state before: none after
            optimizer.state.pop(param, None)
        self._deferred = []


def _same_layout(buffers: Sequence[torch.Tensor], tensors: Sequence[torch.Tensor]) -> bool:
    return len(buffers) == len(tensors) and all(
        b.shape == t.shape and b.dtype == t.dtype and b.device == t.device
        and b.stride() == t.stride() for b, t in zip(buffers, tensors, strict=True))
