"""State records of a train cell mindwatch did not build (``nn.TrainOneStepCell``,
MindSpore Transformers' ``MFTrainOneStepCell``): measured from the callback after the step,
where MindFormers' own ``TrainingStateMonitor`` measures them, and the same way: per tensor,
a reduction on the device, so one scalar per tensor reaches the host, never the tensor.

What the callback can see: the weights after the step and the optimizer's moments (found by
their names, state_probe.py). The update (the weights after minus before) needs a copy of
every weight before the step, which only a train step of mindwatch's own takes (``wrap``'s
in its graph, MindSpore Transformers' ``MindWatchTrainOneStepCell`` before its call with
``copies_before``), so elsewhere ``update_norm`` and ``update_ratio`` are null. A layer's
``grad_norm`` is there when the cell returns each gradient's squared norm (MindFormers'
``runner_wrapper.local_norm``).
"""
from __future__ import annotations

from typing import Any

import mindspore as ms
import numpy as np
from mindspore import nn, ops

from ...pipeline.layer_state import (
    FIRST_MOMENT,
    GRAD,
    SECOND_MOMENT,
    UPDATE,
    WEIGHT,
    StateLayout,
)
from .state_probe import moments_of


def _squares(tensors) -> list:
    # float32 first: a float16 sum of squares overflows at a norm of ~256
    return [ops.reduce_sum(ops.square(tensor.astype(ms.float32))) for tensor in tensors]


def copies_before(optimizer: nn.Optimizer) -> list:
    """Copies of the optimizer's weights on their device, taken before a state step by a
    train cell of mindwatch's own whose graph cannot take them (MindSpore Transformers'):
    the update is the weights after minus these. One weight's worth of device memory more
    for the step."""
    return [ops.mul(weight, 1) for weight in optimizer.parameters]


def host_state(optimizer: nn.Optimizer, grad_sq: Any = None,
               before: list | None = None) -> tuple[StateLayout, np.ndarray]:
    """The layout and the vector of squared norms (as the state graph returns them), for
    the optimizer's weights as they are now; ``grad_sq``: each gradient's squared norm in
    the order of ``optimizer.parameters``, or None; ``before``: ``copies_before``'s, or
    None (no update)."""
    weights = list(optimizer.parameters)
    first, second = moments_of(optimizer, weights)
    quantities, blocks = [WEIGHT], _squares(weights)
    if before is not None:
        quantities.append(UPDATE)
        blocks += _squares(ops.sub(after.astype(ms.float32), old.astype(ms.float32))
                           for after, old in zip(weights, before, strict=True))
    for quantity, tensors in ((FIRST_MOMENT, first), (SECOND_MOMENT, second)):
        if tensors is not None:
            quantities.append(quantity)
            blocks += _squares(tensors)
    vector = ops.stack(blocks).asnumpy().astype(np.float64)        # one copy to the host
    if grad_sq is not None and len(grad_sq) == len(weights):
        block = 2 if before is not None else 1                     # after WEIGHT (and UPDATE)
        quantities.insert(block, GRAD)
        at = block * len(weights)
        vector = np.concatenate((vector[:at], np.asarray(grad_sq, np.float64), vector[at:]))
    return StateLayout(tuple(weight.name for weight in weights), tuple(quantities)), vector
