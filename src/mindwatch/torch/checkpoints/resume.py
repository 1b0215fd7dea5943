"""The anomaly report's resume advice (``FrameworkHooks.resume_hint``), in the terms of the
loop that ran: a plain loop loads mindwatch's checkpoint file itself; Hugging Face's Trainer
and Lightning resume from their own checkpoint of the same step, which their callbacks have
the trainer write when a stop asks for a checkpoint (trainers/). mindwatch's file would not
do there: the trainer builds its own optimizer (Hugging Face's has two parameter groups, so
``optimizer.load_state_dict`` refuses a plain one's state) and restores its own loop state
(step, data position, RNG) only from its own layout.

When the stop's checkpoint holds damaged weights, the advice names an older state instead
(decisions/last_good.py), among what the trainer saved before (``saved_states``): Hugging
Face's ``checkpoint-<global step>`` folders in its ``output_dir`` and the Lightning checkpoints
mindwatch had written (``lightning_step<N>.ckpt``); the code then resumes from that one."""
from __future__ import annotations

import os
import re

from ...decisions.anomaly_report import Snippet
from ...framework import SavedStates
from .training_state import HF, LIGHTNING, TrainingState

# Hugging Face's PREFIX_CHECKPOINT_DIR-<global step>, and the Lightning files the callback
# has the trainer write: each holds the state after that step
_SAVED = {HF: re.compile(r"checkpoint-(\d+)"), LIGHTNING: re.compile(r"lightning_step(\d+)\.ckpt")}


def resume_snippet(path: str, state: TrainingState) -> Snippet:
    """Code that resumes from the checkpoint at ``path``: one the trainer saved, or
    mindwatch's own file (the trainer's checkpoint of the same step stands for it; an older
    one of mindwatch's loads as under a plain loop)."""
    own = state.trainer_checkpoint
    target = path if _trainer_step(path, state) is not None else \
        own if own and _trainer_step(own, state) == _own_step(path) else None
    if state.trainer == HF and target:
        return _trainer_snippet(
            "Hugging Face's Trainer", "HFCallback", target == own,
            f'trainer.train(resume_from_checkpoint="{target}")', "")
    if state.trainer == LIGHTNING and target:
        return _trainer_snippet(
            "Lightning", "LightningCallback", target == own,
            f'trainer.fit(model, ckpt_path="{target}")',
            "\n# and your dataloaders or datamodule given as before")
    return plain_snippet(path, state)


def saved_states(state: TrainingState) -> SavedStates:
    """The trainer's checkpoints beside the one of the step being observed (``(step,
    path)``, oldest first); none under a plain loop."""
    pattern = _SAVED.get(state.trainer or "")
    if pattern is None or not state.trainer_checkpoint:
        return SavedStates()
    directory = os.path.dirname(state.trainer_checkpoint)
    try:
        names = os.listdir(directory)
    except OSError:
        return SavedStates()
    found = sorted((int(match[1]), os.path.join(directory, name))
                   for name in names if (match := pattern.fullmatch(name)))
    return SavedStates(states=tuple(found))


def _trainer_step(path: str, state: TrainingState) -> int | None:
    """The step of a checkpoint the trainer saved; None for any other path."""
    pattern = _SAVED.get(state.trainer or "")
    match = pattern.fullmatch(os.path.basename(path)) if pattern is not None else None
    return int(match[1]) if match else None


def _own_step(path: str) -> int | None:
    """The step of mindwatch's own checkpoint (basics.run_dir.checkpoint_path's name)."""
    match = re.search(r"_step(\d+)_rank\d+\.ckpt$", path)
    return int(match[1]) if match else None


def _trainer_snippet(trainer: str, callback: str, same_step: bool, call: str,
                     also: str) -> Snippet:
    what = ([f"# {trainer} wrote its own checkpoint of this step when mindwatch stopped the run,",
             "# of the same training state as the checkpoint above. Resume from it in the same",
             f"# script, with {callback}(..., resume=True) (the run log goes on){also}:"]
            if same_step else
            [f"# {trainer}'s own checkpoint of the last good state named above. Resume from it",
             f"# in the same script, with {callback}(..., resume=True) (the run log goes "
             f"on){also}:"])
    return Snippet("\n".join([*what, call]), "python")


def plain_snippet(path: str, state: TrainingState) -> Snippet:
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
