"""State steps under PyTorch: every ``state_interval`` steps, for each trained parameter, the
squared L2 norms of its weight after the step, of the update the step applied, of its
pre-clip gradient and of the optimizer's first and second moments where it keeps them
(``exp_avg``/``momentum_buffer``, ``exp_avg_sq``/``square_avg``), summed per layer by the
core (pipeline/layer_state.py) into the ``state`` record.

The gradients' norms are taken on the device when the step is measured (before clipping; the
loop clears the gradients before ``observe``), the rest at ``observe``, after the verdict is
settled: the update is the weights minus their copy from before the step (withholding's
copy, or one taken on state steps when nothing is withheld), so a withheld update is exactly
zero. One read to the host per state step; other steps pay nothing.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch

from ...pipeline.layer_state import (
    FIRST_MOMENT,
    GRAD,
    SECOND_MOMENT,
    UPDATE,
    WEIGHT,
    StateFields,
    StateLayout,
)

FIRST_MOMENT_KEYS = ("exp_avg", "momentum_buffer")
SECOND_MOMENT_KEYS = ("exp_avg_sq", "square_avg")


class StateProbe:
    """``interval``: the ``state_interval`` setting (None: never)."""

    def __init__(self, interval: int | None, names: Callable[[], dict[int, str]]):
        self.interval = interval
        self._names = names              # id(parameter) -> its name
        self._fields = StateFields()
        self._params: list[torch.Tensor] | None = None
        self._grad_sq: torch.Tensor | None = None
        self._before: Sequence[torch.Tensor] | None = None

    def due(self, step: int) -> bool:
        return self.interval is not None and step > 0 and step % self.interval == 0

    def begin(self, params: list[torch.Tensor], grads: list[torch.Tensor],
              before: Sequence[torch.Tensor] | None) -> None:
        """At the measure of a state step: the gradients' squared norms (device), and the
        weights before the step (``before``: withholding's copies; None: copied here)."""
        with torch.no_grad():
            self._params = params
            self._grad_sq = torch.stack(torch._foreach_norm(grads)).float().square() \
                if grads else None
            self._before = before if before is not None else [p.detach().clone()
                                                              for p in params]

    def read(self, step: int, optimizer: torch.optim.Optimizer) -> dict[str, Any] | None:
        """``Monitor.observe_state``'s arguments of the step just observed, if it was a
        state step (read once)."""
        params, before, grad_sq = self._params, self._before, self._grad_sq
        self._params = self._before = self._grad_sq = None
        if not params or before is None:
            return None
        with torch.no_grad():
            blocks = [_squares(params), _squares(torch._foreach_sub(params, list(before)))]
            quantities = [WEIGHT, UPDATE]
            if grad_sq is not None:
                blocks.append(grad_sq)
                quantities.append(GRAD)
            for quantity, keys in ((FIRST_MOMENT, FIRST_MOMENT_KEYS),
                                   (SECOND_MOMENT, SECOND_MOMENT_KEYS)):
                moments = _moments(optimizer, params, keys)
                if moments is not None:
                    blocks.append(_squares(moments))
                    quantities.append(quantity)
            vector = torch.cat([block.to(blocks[0].device) for block in blocks]).cpu()
        names = self._names()
        layout = StateLayout(tuple(names.get(id(p), f"param.{i}") for i, p in
                                   enumerate(params)), tuple(quantities))
        return self._fields.fields(step, layout, vector)


def _squares(tensors: list[torch.Tensor]) -> torch.Tensor:
    # float32 first: a float16 sum of squares overflows at a norm of ~256
    return torch.stack([t.detach().float().square().sum() for t in tensors])


def _moments(optimizer: torch.optim.Optimizer, params: list[torch.Tensor],
             keys: tuple[str, ...]) -> list[torch.Tensor] | None:
    """Each parameter's moment under the first of ``keys`` every parameter has; None."""
    for key in keys:
        found = [optimizer.state.get(p, {}).get(key) for p in params]
        if all(isinstance(m, torch.Tensor) for m in found):
            return found                     # type: ignore[return-value,unused-ignore]
    return None
