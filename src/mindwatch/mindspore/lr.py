"""The learning rate applied at a step, read from the optimizer on the host.

After a step the optimizer's ``global_step`` already counts that step, so ``get_lr()`` then
gives the *next* step's LR. The LR applied at the step that just ran is the schedule at
``global_step - 1``. This is only needed without ``wrap``: the wrapped step returns the LR it
used, read in the graph before the update.
"""
from __future__ import annotations

from typing import List, Optional

import mindspore as ms
import numpy as np
from mindspore import nn


def _schedule_value(schedule, index: int) -> float:
    inner = getattr(schedule, "learning_rate", None)
    if isinstance(inner, ms.Parameter):
        values = inner.asnumpy().reshape(-1)
        if values.size == 1:            # a fixed LR wrapped as a schedule (group LRs)
            return float(values[0])
        # A per-step LR list: MindSpore's gather reads past the end as 0; say so plainly.
        return float(values[index]) if 0 <= index < values.size else float("nan")
    return float(schedule(ms.Tensor(index, ms.int32)).asnumpy().reshape(-1)[0])


def group_indices(optimizer: nn.Optimizer) -> List[int]:
    """Index of each parameter group's first entry in ``optimizer.learning_rate``.

    With group LRs MindSpore keeps one LR entry per *parameter*, all parameters of a group
    sharing the same object; a group is therefore one distinct object, in first-seen order.
    """
    if not optimizer.is_group_lr:
        return [0]
    seen, indices = set(), []
    for index, entry in enumerate(optimizer.learning_rate):
        if id(entry) not in seen:
            seen.add(id(entry))
            indices.append(index)
    return indices


def applied_lrs(optimizer: nn.Optimizer) -> Optional[List[float]]:
    """Every group's LR applied at the step that just finished (one entry without groups)."""
    if optimizer is None:
        return None
    index = int(optimizer.global_step.asnumpy().reshape(-1)[0]) - 1
    index = max(index, 0)
    learning_rate = optimizer.learning_rate
    if optimizer.is_group_lr:
        entries = list(learning_rate)
        groups = [entries[i] for i in group_indices(optimizer)]
    else:
        groups = [learning_rate]
    values = []
    for group in groups:
        if isinstance(group, ms.Parameter):
            values.append(float(np.asarray(group.asnumpy()).reshape(-1)[0]))
        else:
            values.append(_schedule_value(group, index))
    return values
