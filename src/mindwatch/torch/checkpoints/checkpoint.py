"""Checkpoints of the training state at an anomaly or a signal, written atomically.

One ``torch.save`` file: the model's ``state_dict`` (or, without a model, the optimizer's
parameters in ``param_groups`` order), the optimizer's, each LR scheduler's, and the step.
The model's keys are its plain module's (training_state.py: no ``_orig_mod.`` of
``torch.compile``, no ``module.`` of DDP). The resume advice is resume.py's.
"""
from __future__ import annotations

import contextlib
import os
from typing import Any

import torch

from ...basics.run_dir import apply_umask, checkpoint_path
from .resume import resume_snippet as resume_snippet  # callback.py imports it from here
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
