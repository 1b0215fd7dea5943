"""How many samples a batch holds, for a trainer that hands its callbacks the batch but not its
size (Lightning): the first dimension of the first tensor found in it, depth first through
mappings, lists, tuples and dataclasses (``(x, y)``, ``{"input_ids": ...}``)."""
from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import torch

_DEPTH = 8          # deeper than any batch: a self-referencing structure ends here


def samples_in(batch: Any, depth: int = 0) -> int | None:
    """The first dimension of the first tensor of at least one dimension; None when there
    is none (a batch of Python objects, or 0-d tensors only)."""
    if isinstance(batch, torch.Tensor):
        return int(batch.shape[0]) if batch.dim() > 0 else None
    if depth >= _DEPTH or isinstance(batch, (str, bytes)):
        return None
    if isinstance(batch, Mapping):
        items: Any = batch.values()
    elif isinstance(batch, (list, tuple)):
        items = batch
    elif dataclasses.is_dataclass(batch) and not isinstance(batch, type):
        items = (getattr(batch, f.name) for f in dataclasses.fields(batch))
    else:
        return None
    for item in items:
        found = samples_in(item, depth + 1)
        if found is not None:
            return found
    return None
