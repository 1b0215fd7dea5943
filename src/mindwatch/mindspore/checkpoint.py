"""Checkpoints of the weights at an anomaly, written atomically."""
from __future__ import annotations

import os

import mindspore as ms
from mindspore import nn

from ..run_dir import checkpoint_path


def save_atomically(cell: nn.Cell, log_dir: str, step: int, rank: int) -> str:
    """Save ``cell``'s parameters (weights, and optimizer state when ``cell`` holds the
    optimizer) under a temporary name, then rename: a reader never sees a partial file."""
    final = checkpoint_path(log_dir, step, rank)
    os.makedirs(os.path.dirname(final), exist_ok=True)
    # save_checkpoint appends ".ckpt" to names that lack it, so the temp name keeps the suffix.
    temporary = final[: -len(".ckpt")] + f".tmp-{os.getpid()}.ckpt"
    ms.save_checkpoint(cell, temporary)
    os.replace(temporary, final)
    return final


def resume_snippet(path: str) -> str:
    return (f'params = mindspore.load_checkpoint("{path}")\n'
            "mindspore.load_param_into_net(train_step, params)  # or the bare network\n"
            "model.train(remaining_epochs, dataset, callbacks=[monitor])")
