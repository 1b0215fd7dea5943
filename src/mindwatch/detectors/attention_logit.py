"""``attention_logit``: an attention cell whose largest logit (before the softmax) is above
``max_attention_logit``.

Logits that grow without bound are how attention collapses in large Transformer runs: the
softmax saturates onto one key, its gradient vanishes, and the loss diverges later, often
thousands of steps later. Megatron's QK-clip acts above 100 for the same reason, and 100 is
the default here: healthy models stay at tens (a logit is a scaled dot product of a query
and a key, ~sqrt(head_dim) times their cosine at unit-RMS activations). One anomaly per cell
and episode; the message names the worst cell.
"""
from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from ..anomaly import ATTENTION_LOGIT, Anomaly
from ..basics.checks import check_number
from ..records import Activation
from .base import Detector, Episode


class AttentionLogitDetector(Detector):
    def __init__(self, *, limit: float):
        check_number("max_attention_logit", limit, low=0.0, low_open=True)
        self.limit = limit
        self._episodes: dict[str, Episode] = {}

    def update_state(self, step: int, layers: Mapping[str, Mapping[str, Any]],
                     activations: Mapping[str, Mapping[str, Any]] | None = None
                     ) -> list[Anomaly]:
        worst: tuple[float, str] | None = None
        for cell, fields in (activations or {}).items():
            logit = fields.get(Activation.MAX_LOGIT)
            if logit is None:
                continue
            # NaN logits are a non-finite fault the loss and gradient rules already report
            past = not math.isnan(logit) and logit > self.limit
            if self._episodes.setdefault(cell, Episode()).starts(past) \
                    and (worst is None or logit > worst[0]):
                worst = (logit, cell)
        if worst is None:
            return []
        logit, cell = worst
        return [Anomaly(ATTENTION_LOGIT, step, logit, self.limit,
                        f"attention {cell}: largest logit {logit:.4g} at step {step} is above "
                        f"max_attention_logit {self.limit:g} (its softmax is near one-hot)",
                        layer=cell)]

    def state_dict(self) -> dict[str, Any]:
        return {"episodes": [cell for cell, e in self._episodes.items() if e.active]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._episodes = {}
        for cell in state.get("episodes", []):
            self._episodes.setdefault(cell, Episode()).active = True
