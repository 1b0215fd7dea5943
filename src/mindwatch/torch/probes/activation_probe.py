"""``protect(..., activations=[...], attention_logits=[...])``: what chosen sub-modules output,
measured on state steps only, by forward hooks.

A hook is registered on each module whose name matches a pattern (fnmatch over
``model.named_modules()``). On the forward of a step that is a state step, in training mode,
it keeps on the device the output's max |x| and RMS (``activations``) or, for a module whose
output is the attention logits before the softmax (``attention_logits``), their largest
value; other forwards cost one Python call. With several forwards before one step (gradient
accumulation) the last one counts. ``observe`` reads them in one vector into the ``state``
record's ``activations``.

An ``nn.MultiheadAttention`` named in ``attention_logits`` shows no logits (its output is
after the softmax): its hook recomputes them from the forward's inputs
(attention_logits.py). Any other module named there must output the logits themselves.
"""
from __future__ import annotations

import fnmatch
from collections.abc import Callable, Sequence
from typing import Any

import torch

from ...records import Activation
from .attention_logits import largest_logit


class ActivationProbes:
    def __init__(self, model: torch.nn.Module, *, activations: Sequence[str] | None,
                 attention_logits: Sequence[str] | None, due: Callable[[], bool]):
        self._due = due
        self._values: dict[str, list[torch.Tensor]] = {}
        modules = dict(model.named_modules())
        self._outputs = _matching(modules, activations, "activations")
        self._logits = _matching(modules, attention_logits, "attention_logits")
        self._handles = [modules[name].register_forward_hook(self._hook(name), with_kwargs=True)
                         for name in sorted(set(self._outputs) | set(self._logits),
                                            key=list(modules).index)]

    def _hook(self, name: str) -> Callable[..., None]:
        def hook(module: torch.nn.Module, args: tuple, kwargs: dict, output: Any) -> None:
            if not module.training or not self._due():
                return
            x = output[0] if isinstance(output, tuple) else output
            if not isinstance(x, torch.Tensor):
                return
            with torch.no_grad():
                x = x.detach().float()
                values = []
                if name in self._outputs:
                    values += [x.abs().max(), x.square().mean().sqrt()]
                if name in self._logits:
                    values.append(largest_logit(module, args, kwargs)
                                  if isinstance(module, torch.nn.MultiheadAttention)
                                  else x.max())
                self._values[name] = values
        return hook

    def read(self) -> dict[str, dict[str, float]] | None:
        """Each probed module's numbers from the last state step's forward (read once)."""
        values, self._values = self._values, {}
        if not values:
            return None
        flat = torch.stack([v.to("cpu") for row in values.values() for v in row]).tolist()
        out: dict[str, dict[str, float]] = {}
        position = 0
        for name in values:
            entry: dict[str, float] = {}
            if name in self._outputs:
                entry[Activation.MAX_ABS], entry[Activation.RMS] = flat[position:position + 2]
                position += 2
            if name in self._logits:
                entry[Activation.MAX_LOGIT] = flat[position]
                position += 1
            out[name] = entry
        return out

    def remove(self) -> None:
        for handle in self._handles:
            handle.remove()


def _matching(modules: dict[str, torch.nn.Module], patterns: Sequence[str] | None,
              argument: str) -> list[str]:
    if patterns is None:
        return []
    if isinstance(patterns, str) or not all(isinstance(p, str) for p in patterns):
        raise TypeError(f"{argument} must be a list of fnmatch patterns over module names; "
                        f"got {patterns!r}")
    names = [name for name in modules if name]
    found = []
    for pattern in patterns:
        matched = [name for name in names if fnmatch.fnmatchcase(name, pattern)]
        if not matched:
            raise ValueError(f"{argument}: {pattern!r} matches no module of the model; its "
                             f"modules are named like {', '.join(names[:6])}")
        found += [name for name in matched if name not in found]
    return found
