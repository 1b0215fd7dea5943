"""Withholding an optimizer's update on the device, for any ``torch.optim`` optimizer.

A ``torch.optim`` step updates the parameters and its state in place, with no way to make it
conditional on a device value without reading that value to the host. So the step runs
always, and the update is undone where it must be: before the step every tensor it may change
(each parameter with a gradient, each tensor of its optimizer state) is copied into a buffer
kept from step to step; after it, ``torch.where(apply, new, old)`` writes back into each
parameter either the step's values or the copy, bit for bit, on the device: the next forward
computes with the right weights whatever the host has read. Nothing is read to the host.

The optimizer state is read again only by the next optimizer step, and ``observe`` reads the
step's verdict before it (or, if nobody observed the step, the next step's pre-hook does). So
the state is put back then, on the host's word and only after a withheld update: on a
healthy step it costs its copy, not a second pass. The host also settles what the device
could not select: state an optimizer creates at its first step (removed again), state values
held as Python numbers, and parameters on another device than the verdict.

Cost (``benchmarks/torch_overhead.py``): one more copy of the parameters and optimizer state
in memory (with AdamW, three times the weights' bytes); per healthy step on an accelerator, a
copy of them and a select over the parameters. On the CPU the protected step reads its
verdict first and calls ``before`` only for a step it withholds (protection.py).
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

    def params_before(self) -> list[torch.Tensor]:
        """The copies of the parameters from before the step (in ``before``'s order)."""
        return [buffer for (holder, _), buffer in zip(self._slots, self._buffers, strict=True)
                if holder is None]

    def after(self, apply: torch.Tensor) -> None:
        """Each parameter: the step's values where ``apply``, the copy elsewhere; the state
        and what the device cannot select wait for ``settle``."""
        self._deferred = []
        verdicts = {apply.device: apply}
        with torch.no_grad():
            for index, ((holder, _), tensor) in enumerate(zip(self._slots, self._tensors,
                                                              strict=True)):
                if holder is not None or (tensor.device.type == "cpu"
                                          and apply.device.type != "cpu"):
                    self._deferred.append(index)
                    continue
                verdict = verdicts.get(tensor.device)
                if verdict is None:
                    verdict = verdicts[tensor.device] = apply.to(tensor.device,
                                                                 non_blocking=True)
                torch.where(verdict, tensor, self._buffers[index], out=tensor)

    def settle(self, applied: bool) -> None:
        """The host's part, once the verdict is read: after a withheld update, put back the
        optimizer state and what the device could not select."""
        optimizer, self._optimizer = self._optimizer, None
        if applied or optimizer is None:
            return
        with torch.no_grad():
            targets = [self._tensors[index] for index in self._deferred]
            if targets:
                torch._foreach_copy_(targets,
                                     [self._buffers[index] for index in self._deferred])
            for index, target in zip(self._deferred, targets, strict=True):
                holder, key = self._slots[index]
                if holder is not None:          # the tensor the step found, even if replaced
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
