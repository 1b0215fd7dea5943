"""The loss, summarised: an exponential moving average per step and a mean per epoch.

Non-finite losses are counted, never folded into an average they would poison; nor is the
loss of a step whose update was withheld (a 1e6 spike that never reached the weights is no
part of the run's trend). Memory stays
flat however long an epoch is (an LLM epoch may be 10M steps): the epoch's sum is kept as
the few exact partial sums of Shewchuk's algorithm (what ``math.fsum`` does over a list),
so the mean is the correctly rounded one without holding every loss.
"""
from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from ..records import Epoch, Step

# state_dict key of the previous epoch's mean loss
_PREVIOUS_MEAN = "previous_epoch_mean"


class LossStats:
    def __init__(self, smoothing: float):
        self.smoothing = smoothing          # weight of the history in the moving average
        self.smooth: float | None = None
        self.epoch: int | None = None
        self._partials: list[float] = []   # exact running sum of the epoch's finite losses
        self._count = 0                    # finite losses added this epoch
        self._nonfinite = 0                # non-finite losses added this epoch
        self._steps = 0
        self._previous_mean: float | None = None

    def add(self, loss: float | None, steps: int, *, withheld: bool = False) -> None:
        if loss is None:
            pass
        elif not math.isfinite(loss):
            self._nonfinite += 1
        elif not withheld:
            self.smooth = (loss if self.smooth is None
                           else self.smoothing * self.smooth + (1 - self.smoothing) * loss)
            _add_exact(self._partials, loss)
            self._count += 1
        self._steps += steps

    def end_epoch(self) -> dict[str, Any] | None:
        """The finished epoch's record fields (None when nothing was added), then reset."""
        if self.epoch is None or self._steps == 0:
            return None
        mean = math.fsum(self._partials) / self._count if self._count else None
        change = converging = None
        if mean is not None and self._previous_mean is not None:
            change = mean - self._previous_mean
            converging = change < 0
        fields = {Epoch.EPOCH: self.epoch, Epoch.LOSS_MEAN: mean, Epoch.STEPS: self._steps,
                  Epoch.LOSS_CHANGE: change, Epoch.CONVERGING: converging,
                  Epoch.NONFINITE_LOSSES: self._nonfinite}
        if mean is not None:
            self._previous_mean = mean
        self._partials, self._count, self._nonfinite, self._steps = [], 0, 0, 0
        return fields

    def state_dict(self) -> dict[str, Any]:
        return {Step.LOSS_SMOOTH: self.smooth, _PREVIOUS_MEAN: self._previous_mean}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.resume(smooth=state.get(Step.LOSS_SMOOTH), previous_mean=state.get(_PREVIOUS_MEAN))

    def resume(self, *, smooth: float | None, previous_mean: float | None) -> None:
        """A resumed run's: the smoothed loss and the last epoch's mean (read from its log:
        pipeline/resumed_history.py)."""
        self.smooth, self._previous_mean = smooth, previous_mean


def _add_exact(partials: list[float], value: float) -> None:
    """Add ``value`` to the non-overlapping partial sums whose exact total is the running sum
    (Shewchuk; the Python recipe ``msum``). The list stays a handful of floats long."""
    i = 0
    for partial in partials:
        if abs(value) < abs(partial):
            value, partial = partial, value
        high = value + partial
        low = partial - (high - value)
        if low:
            partials[i] = low
            i += 1
        value = high
    partials[i:] = [value]
