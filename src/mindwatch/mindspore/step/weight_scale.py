"""The trained weights' scale, for the update-size rule (detectors/update_size.py).

MindSpore's protected step decides in its graph against limits the host hands it, so the
weights' norm is measured here, on the device, by a graph of its own (one reduction over the
optimizer's parameters, one scalar read): when training begins, and again every
``REFRESH_STEPS`` steps. Measuring it inside every step would cost a second pass over the
weights per step (~5% of a small model's CPU step, like the gradient norm's); the weights'
RMS moves by a fraction of a percent over that many healthy steps, far inside the rule's
margin.
"""
from __future__ import annotations

import math

import mindspore as ms
from mindspore import nn, ops

from ...detectors.update_size import WeightScale, rule_of
from .graph_sums import square_sum

REFRESH_STEPS = 100


class _SquareSum(nn.Cell):
    def __init__(self, params):
        super().__init__(auto_prefix=False)
        self.params = ms.ParameterTuple(params)
        self.hyper_map = ops.HyperMap()

    def construct(self):
        return ops.addn(self.hyper_map(square_sum, self.params))


class WeightScaleProbe:
    """``measure()``: the scale of ``optimizer``'s parameters now; ``due(step)``: whether a
    step's end should measure again."""

    def __init__(self, optimizer: nn.Optimizer):
        params = list(optimizer.parameters)
        self._sum = _SquareSum(params) if params else None
        self._count = sum(int(p.size) for p in params)
        self._rule = rule_of(optimizer)
        self._measured_at = 0

    def measure(self, step: int = 0) -> WeightScale:
        self._measured_at = step
        if self._sum is None or self._rule is None:     # nothing to judge: no graph to run
            return WeightScale(norm=0.0, count=self._count, rule=self._rule)
        square = float(self._sum().asnumpy())
        return WeightScale(norm=math.sqrt(square) if square >= 0 else math.nan,
                           count=self._count, rule=self._rule)

    def due(self, step: int) -> bool:
        return step // REFRESH_STEPS > self._measured_at // REFRESH_STEPS
