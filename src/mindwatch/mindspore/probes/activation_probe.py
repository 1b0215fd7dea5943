"""``wrap(..., activations=[...], attention_logits=[...])``: what chosen sub-Cells output,
measured in the graph on state steps only.

A matched sub-Cell stays the same object, with the same name and the same Parameters (a
checkpoint is unchanged, ``net.blocks[0].attn`` still reaches it): only its class changes,
to a subclass whose ``construct`` runs the original one and then, while
``mindwatch_recording`` is set, writes four float32 numbers into a small Parameter of its
own: whether it ran, the output's max |x| and RMS, and its largest attention logit. The flag
is read when the graph is compiled: it is set only around the state graph's calls (which
compile it once), so the ordinary graph, compiled with the flag off, holds none of it, and in
PyNative mode the ordinary steps skip it by a Python ``if``. The Parameters are kept outside
the Cell tree: no checkpoint, optimizer or ``get_parameters()`` sees them.

An attention-logit cell is an ``nn.MultiheadAttention`` (its logits recomputed from its
inputs, attention_logits.py) or any other Cell whose output is the attention logits before
the softmax (a custom attention exposes them as a sub-Cell, as the demo model does).
"""
from __future__ import annotations

import contextlib
import fnmatch
from collections.abc import Iterator, Sequence
from typing import Any

import mindspore as ms
import numpy as np
from mindspore import nn, ops

from ...records import Activation
from .attention_logits import is_multihead_attention, multihead_max_logit

# What a probe's Parameter holds: RAN is set to 1 by the graph, reset to 0 before each state
# step, so a cell that a state step did not call reports nothing rather than old numbers.
RAN, MAX_ABS, RMS, MAX_LOGIT = range(4)
_RESET = np.zeros(4, np.float32)
OWN_PREFIX = "mindwatch_activation_"
LOGITS_FROM_OUTPUT, LOGITS_FROM_INPUTS = 1, 2


def _measure(self, out, logit):
    x = out[0] if isinstance(out, tuple) else out
    x = ops.stop_gradient(x).astype(ms.float32)
    zero = ops.zeros((), ms.float32)
    max_abs, rms = zero, zero
    if self.mindwatch_outputs:
        max_abs, rms = ops.abs(x).max(), ops.sqrt(ops.mean(x * x))
    if self.mindwatch_logits == LOGITS_FROM_OUTPUT:
        logit = x.max()
    stats = ops.stack((ops.ones((), ms.float32), max_abs, rms, logit))
    return ops.depend(out, ops.assign(self.mindwatch_stats, stats))


def _probed_construct(self, *args, **kwargs):
    out = self.mindwatch_inner_construct(*args, **kwargs)
    if self.mindwatch_recording:
        out = _measure(self, out, ops.zeros((), ms.float32))
    return out


def _probed_attention_construct(self, query, key, value, key_padding_mask=None,
                                need_weights=True, attn_mask=None, average_attn_weights=True):
    out = self.mindwatch_inner_construct(query, key, value, key_padding_mask, need_weights,
                                         attn_mask, average_attn_weights)
    if self.mindwatch_recording:
        logit = ops.zeros((), ms.float32)
        if self.mindwatch_logits == LOGITS_FROM_INPUTS:
            logit = multihead_max_logit(self, query, key, key_padding_mask, attn_mask)
        out = _measure(self, out, logit)
    return out


_PROBED: dict[type, type] = {}


def _probed_class(cls: type) -> type:
    probed = _PROBED.get(cls)
    if probed is None:
        construct = (_probed_attention_construct if issubclass(cls, nn.MultiheadAttention)
                     else _probed_construct)
        probed = type(cls.__name__, (cls,), {
            "construct": construct, "mindwatch_inner_construct": cls.construct,  # type: ignore[attr-defined]
            "__module__": cls.__module__, "__qualname__": cls.__qualname__})
        _PROBED[cls] = probed
    return probed


def sub_cells(network: nn.Cell) -> Iterator[tuple[str, nn.Cell]]:
    """``(name, cell)`` of every sub-Cell, named as its Parameters are (a Cell built with
    ``auto_prefix=False``, such as ``nn.WithLossCell``, adds nothing to its children's
    names): ``blocks.0.attn`` holds ``blocks.0.attn.qkv.weight``."""
    stack = [("", network)]
    while stack:
        prefix, cell = stack.pop()
        for name, child in reversed(list(cell.name_cells().items())):
            full = f"{prefix}{name}" if getattr(cell, "_auto_prefix", True) else prefix[:-1]
            if full:
                yield full, child
            stack.append((f"{full}." if full else "", child))


def _patterns(what: str, patterns: Sequence[str] | None) -> tuple[str, ...]:
    if patterns is None:
        return ()
    if isinstance(patterns, str) or not all(isinstance(p, str) for p in patterns):
        raise TypeError(f"{what} must be a list of fnmatch patterns over sub-Cell names "
                        f"(e.g. ['blocks.*.mlp']); got {patterns!r}")
    return tuple(patterns)


class ActivationProbes:
    """The probed sub-Cells of ``network``. Raises ValueError for a pattern that matches
    none (naming some of the sub-Cells there are) and TypeError for a Cell whose class
    cannot be swapped."""

    def __init__(self, network: nn.Cell, *, activations: Sequence[str] | None = None,
                 attention_logits: Sequence[str] | None = None):
        outputs = _patterns("activations", activations)
        logits = _patterns("attention_logits", attention_logits)
        named: dict[str, nn.Cell] = {}
        for name, cell in sub_cells(network):
            named.setdefault(name, cell)        # a Cell reachable twice keeps its first name
        self.cells: dict[str, nn.Cell] = {}
        for what, patterns in (("activations", outputs), ("attention_logits", logits)):
            for pattern in patterns:
                found = [name for name in named if fnmatch.fnmatchcase(name, pattern)]
                if not found:
                    some = ", ".join(list(named)[:8]) or "none"
                    raise ValueError(f"{what} pattern {pattern!r} matches no sub-Cell of the "
                                     f"network; its sub-Cells are named like: {some}")
                for name in found:
                    self._probe(name, named[name], outputs=what == "activations")

    def _probe(self, name: str, cell: nn.Cell, *, outputs: bool) -> None:
        # a Cell shared by two parents has two names: it is probed once, under the first,
        # and what either pattern asked for is set on it
        if not any(known is cell for known in self.cells.values()):
            if not hasattr(cell, "mindwatch_stats"):
                try:
                    cell.__class__ = _probed_class(type(cell))
                except TypeError as error:
                    raise TypeError(f"cannot watch the outputs of sub-Cell {name!r} "
                                    f"({type(cell).__name__}): {error}") from None
                stats = ms.Parameter(ms.Tensor(_RESET), name=OWN_PREFIX + name,
                                     requires_grad=False)
                for attribute, value in (("mindwatch_stats", stats),
                                         ("mindwatch_recording", False),
                                         ("mindwatch_outputs", False), ("mindwatch_logits", 0)):
                    object.__setattr__(cell, attribute, value)
            self.cells[name] = cell
        if outputs:
            object.__setattr__(cell, "mindwatch_outputs", True)
        else:
            object.__setattr__(cell, "mindwatch_logits", LOGITS_FROM_INPUTS
                               if is_multihead_attention(cell) else LOGITS_FROM_OUTPUT)

    def __bool__(self) -> bool:
        return bool(self.cells)

    @contextlib.contextmanager
    def recording(self) -> Iterator[None]:
        """Around a state graph's call: the probes measure (and compile so), afresh."""
        for cell in self.cells.values():
            ops.assign(cell.mindwatch_stats, ms.Tensor(_RESET))
            object.__setattr__(cell, "mindwatch_recording", True)
        try:
            yield
        finally:
            for cell in self.cells.values():
                object.__setattr__(cell, "mindwatch_recording", False)

    def read(self) -> dict[str, dict[str, float]]:
        """``state.activations``: cell -> ``{max_abs, rms}`` and/or ``{max_logit}``, for the
        cells the last state step ran."""
        found: dict[str, dict[str, Any]] = {}
        for name, cell in self.cells.items():
            values = cell.mindwatch_stats.asnumpy().astype(np.float64).tolist()
            if values[RAN] != 1.0:
                continue
            entry = {}
            if cell.mindwatch_outputs:
                entry[Activation.MAX_ABS] = values[MAX_ABS]
                entry[Activation.RMS] = values[RMS]
            if cell.mindwatch_logits:
                entry[Activation.MAX_LOGIT] = values[MAX_LOGIT]
            found[name] = entry
        return found
