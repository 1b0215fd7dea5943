"""Withholding an optimizer's update on the device, for any ``torch.optim`` optimizer.

A ``torch.optim`` step updates the parameters and its state in place, with no way to make it
conditional on a device value without reading that value to the host. So the step runs
always, and the update is undone where it must be: before the step every tensor it may change
(each parameter with a gradient, each tensor of its optimizer state) is copied into a buffer
kept from step to step; after it, ``torch.where(apply, new, old)`` writes back into each of
them either the step's values or the copy, bit for bit, on the device. When
``optimizer.step()`` returns, whatever the host has read, the parameters and the state are
those the verdict chose: the next forward, a checkpoint, ``optimizer.state_dict()`` read
between the step and ``observe``.

Some of it the device cannot select; the host settles it once it knows the verdict
(``settle``): state the step created (removed again after a withheld step), state values
held as Python numbers, state tensors the step replaced by new ones, and tensors on the CPU
beside a verdict on an accelerator (Adam's ``step`` counts unless ``capturable``). ``after``
says whether any of that is left; the protected step then has it settled at the first read
of the optimizer's state (settling_state.py), else by ``observe`` or the next step.

Where the verdict is on the host already (the CPU), a withheld step is undone whole by the
host as soon as the step returns (``restore``), and a healthy one is never copied.

Cost (``benchmarks/torch_overhead.py``): one more copy of the parameters and optimizer state
in memory (with AdamW, three times the weights' bytes); per healthy step on an accelerator, a
copy of them and a select over them (reading two tensors, writing one).
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

    def after(self, apply: torch.Tensor) -> bool:
        """Each parameter and state tensor: the step's values where ``apply``, the copy
        elsewhere, selected on the device. Returns whether the host has a part left for
        ``settle`` (nothing is read to the host to know it)."""
        self._deferred = []
        verdicts = {apply.device: apply}
        with torch.no_grad():
            slots = zip(self._slots, self._tensors, strict=True)
            for index, ((holder, key), tensor) in enumerate(slots):
                replaced = holder is not None and holder.get(key) is not tensor
                if replaced or (tensor.device.type == "cpu" and apply.device.type != "cpu"):
                    self._deferred.append(index)
                    continue
                verdict = verdicts.get(tensor.device)
                if verdict is None:
                    verdict = verdicts[tensor.device] = apply.to(tensor.device,
                                                                 non_blocking=True)
                torch.where(verdict, tensor, self._buffers[index], out=tensor)
        if self._deferred or self._changed():
            return True
        self._optimizer = None                       # nothing left: settled
        return False

    def restore(self) -> None:
        """A step the host knows was withheld: every tensor copied back and the state's
        structure put back, now (no select on the device)."""
        self._deferred = list(range(len(self._slots)))
        self.settle(False)

    @property
    def unsettled(self) -> bool:
        """The last step has a host part not yet settled."""
        return self._optimizer is not None

    def _changed(self) -> bool:
        """Whether the step changed what only the host can put back: keys added to a
        state, state for a parameter that had none, a number."""
        assert self._optimizer is not None
        state = self._optimizer.state
        return (any(entries.keys() - keys for entries, keys in self._keys)
                or any(state.get(param) for param in self._fresh)
                or any(not _same_number(entries.get(key, _MISSING), value)
                       for entries, key, value in self._numbers))

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


_MISSING = object()


def _same_number(current: Any, value: Any) -> bool:
    # the type first: a tensor's == would be a tensor, and its truth a read to the host
    return type(current) is type(value) and current == value


def _same_layout(buffers: Sequence[torch.Tensor], tensors: Sequence[torch.Tensor]) -> bool:
    return len(buffers) == len(tensors) and all(
        b.shape == t.shape and b.dtype == t.dtype and b.device == t.device
        and b.stride() == t.stride() for b, t in zip(buffers, tensors, strict=True))
