"""Checkpoints of the weights at an anomaly, written atomically."""
from __future__ import annotations

import contextlib
import os
from collections.abc import Mapping
from typing import Any

import mindspore as ms
from mindspore import nn

from ...basics.run_dir import apply_umask, checkpoint_path
from ...decisions.anomaly_report import Snippet
from ..step.verdict import OWN_PREFIX


def save_atomically(cell: nn.Cell, log_dir: str, step: int, rank: int,
                    reason: str = "anomaly", *,
                    append: Mapping[str, Any] | None = None) -> str:
    """Save ``cell``'s parameters (weights, and optimizer state when ``cell`` holds the
    optimizer) under a temporary name, then rename: a reader never sees a partial file. A
    failed save (full disk) leaves no temporary file behind and raises. ``append``: more
    entries for the file (``save_checkpoint``'s ``append_dict``: a framework's resume keys)."""
    final = checkpoint_path(log_dir, step, rank, reason)
    os.makedirs(os.path.dirname(final), exist_ok=True)
    # save_checkpoint appends ".ckpt" to names that lack it, so the temp name keeps the suffix.
    temporary = final[: -len(".ckpt")] + f".tmp-{os.getpid()}.ckpt"
    # MindSpore writes "<name>.tmp" first and renames it to ``temporary``
    its_own = temporary[: -len(".ckpt")] + ".tmp"
    try:
        ms.save_checkpoint(cell, temporary,
                           choice_func=lambda name: not name.startswith(OWN_PREFIX),
                           append_dict=dict(append) if append else None)
        # MindSpore leaves its file read-only for the owner alone (0o400): the user's umask
        # decides instead, as for every other file of the run directory
        apply_umask(temporary)
        os.replace(temporary, final)
    except BaseException:
        for leftover in (temporary, its_own):
            with contextlib.suppress(OSError):
                os.remove(leftover)
        raise
    return final


def resume_snippet(path: str) -> Snippet:
    return Snippet(f'params = mindspore.load_checkpoint("{path}")\n'
                   "mindspore.load_param_into_net(train_step, params)  # or the bare network\n"
                   "model.train(remaining_epochs, dataset, callbacks=[monitor])", "python")
