"""``replay``: a withheld step computed once more, on the same batches and weights.

The loop hands ``monitor.backward`` a closure instead of a loss (``lambda: loss_fn(model(x),
y)``); each micro-batch's closure is kept, with the random-number state it ran under (CPU
and the closure's accelerator: dropout draws the same masks again), until the step after.
When ``observe`` finds the step's update withheld, the weights are the ones it saw, so
calling the closures again recomputes its loss and gradients: decisions/replays.py compares
them, bit for bit, with the first results. Nothing of this runs on a step that was not
withheld: keeping a closure and a copy of the CPU generator's state (5 KB) is the whole cost.

The replay's gradients are dropped afterwards (``grad = None``, what ``zero_grad`` leaves),
and the random state is put back as the loop left it: the run goes on as without replay.
Under DDP every rank withholds the same steps (the verdict is shared), so every rank replays
and the backward's all-reduces pair up; the replay's bucket norms are discarded.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from ...observation import ReplayOutcome
from .verdict import StepVerdict

Closure = Callable[[], torch.Tensor]


@dataclass
class _Call:
    closure: Closure
    cpu_rng: torch.Tensor
    device_rng: tuple[Any, torch.Tensor] | None     # (the accelerator module, its state)


def _accelerator() -> Any:
    """``torch.cuda`` or ``torch.npu`` (torch_npu) when one is in use, else None."""
    for name in ("cuda", "npu"):
        module = getattr(torch, name, None)
        if module is not None and module.is_available() and module.is_initialized():
            return module
    return None


class StepReplay:
    """The closures of the step being accumulated, and of the last step measured."""

    def __init__(self) -> None:
        self._current: list[_Call] = []
        self._replayable = True            # every backward of the step gave a closure
        self.last: list[_Call] = []        # the step measured last (empty: cannot replay)

    def run(self, closure: Closure) -> torch.Tensor:
        """``closure()``, kept with the random state it ran under."""
        device = _accelerator()
        self._current.append(_Call(closure, torch.get_rng_state(), None if device is None
                                   else (device, device.get_rng_state())))
        return closure()

    def tensor_given(self) -> None:
        """A backward of this step was given a loss, not a closure: it cannot be replayed."""
        self._replayable = False

    def step_measured(self) -> None:
        self.last = self._current if self._replayable else []
        self._current, self._replayable = [], True

    def replay(self, params: Sequence[torch.nn.Parameter], verdict: StepVerdict,
               lrs: Sequence[float], discard: Callable[[], Any] = lambda: None,
               ) -> ReplayOutcome | None:
        """The last step again: its loss (the sum over its closures, loss_window.py) and
        pre-clip global norm, computed as the protected step computed them, and whether they
        are within the step's bounds."""
        calls, self.last = self.last, []
        if not calls:
            return None
        cpu_rng = torch.get_rng_state()
        device = _accelerator()
        device_rng = None if device is None else device.get_rng_state()
        try:
            for param in params:
                param.grad = None
            loss_sum = None
            for call in calls:
                torch.set_rng_state(call.cpu_rng)
                if call.device_rng is not None:
                    call.device_rng[0].set_rng_state(call.device_rng[1])
                loss = call.closure()
                loss.backward()
                loss = loss.detach().float().reshape(())
                loss_sum = loss if loss_sum is None else loss_sum + loss
            assert loss_sum is not None
            with torch.no_grad():
                grads = [p.grad for p in params if p.grad is not None]
                if grads:
                    norm = torch.nn.utils.get_total_norm(grads, 2.0, False, None).float()
                    loss_value, norm_value = torch.stack(
                        [loss_sum.to(norm.device), norm]).tolist()
                else:
                    loss_value, norm_value = loss_sum.item(), None
        finally:
            for param in params:
                param.grad = None
            discard()
            torch.set_rng_state(cpu_rng)
            if device is not None and device_rng is not None:
                device.set_rng_state(device_rng)
        healthy = verdict.within_bounds(loss=loss_value, grad_norm=norm_value, lrs=lrs)
        return ReplayOutcome(loss=loss_value, grad_norm=norm_value, healthy=healthy)
