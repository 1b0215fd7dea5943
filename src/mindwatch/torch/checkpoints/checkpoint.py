"""Checkpoints of the training state at an anomaly or a signal, written atomically.

One ``torch.save`` file: the model's ``state_dict`` (or, without a model, the optimizer's
parameters in ``param_groups`` order), the optimizer's, each LR scheduler's, and the step.
"""
from __future__ import annotations

import contextlib
import os
from typing import Any

import torch

from ...basics.run_dir import apply_umask, checkpoint_path
from ...decisions.anomaly_report import Snippet
from .training_state import TrainingState


def save_atomically(state: TrainingState, log_dir: str, step: int, rank: int,
                    reason: str = "anomaly") -> str:
    """Save under a temporary name, then rename: a reader never sees a partial file. A
    failed save (a full disk) leaves no temporary file behind and raises."""
    final = checkpoint_path(log_dir, step, rank, reason)
    os.makedirs(os.path.dirname(final), exist_ok=True)
    temporary = f"{final}.tmp-{os.getpid()}"
    payload: dict[str, Any] = {"step": step, **state.state_dicts()}
    try:
        torch.save(payload, temporary)
        apply_umask(temporary)
        os.replace(temporary, final)
    except BaseException:
        with contextlib.suppress(OSError):
            os.remove(temporary)
        raise
    return final


def resume_snippet(path: str, state: TrainingState) -> Snippet:
    lines = [f'saved = torch.load("{path}", weights_only=True)']
    if state.model is not None:
        lines.append('model.load_state_dict(saved["model"])')
    else:
        lines.append('for param, value in zip((p for g in optimizer.param_groups '
                     'for p in g["params"]), saved["params"]):\n    param.data.copy_(value)')
    lines.append('optimizer.load_state_dict(saved["optimizer"])')
    if state.schedulers:
        lines.append('for scheduler, saved_state in zip(schedulers, saved["schedulers"]):\n'
                     '    scheduler.load_state_dict(saved_state)')
    lines.append('# then train on from step saved["step"] + 1')
    return Snippet("\n".join(lines), "python")
