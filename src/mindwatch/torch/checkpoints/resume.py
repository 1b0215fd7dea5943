"""The anomaly report's resume advice (``FrameworkHooks.resume_hint``), in the terms of the
loop that ran: a plain loop loads mindwatch's checkpoint file itself; Hugging Face's Trainer
and Lightning resume from their own checkpoint of the same step, which their callbacks have
the trainer write when a stop asks for a checkpoint (trainers/). mindwatch's file would not
do there: the trainer builds its own optimizer (Hugging Face's has two parameter groups, so
``optimizer.load_state_dict`` refuses a plain one's state) and restores its own loop state
(step, data position, RNG) only from its own layout."""
from __future__ import annotations

from ...decisions.anomaly_report import Snippet
from .training_state import HF, LIGHTNING, TrainingState


def resume_snippet(path: str, state: TrainingState) -> Snippet:
    """Code that resumes from the checkpoint at ``path`` (mindwatch's own file)."""
    if state.trainer == HF and state.trainer_checkpoint:
        return _trainer_snippet(
            "Hugging Face's Trainer", "HFCallback",
            f'trainer.train(resume_from_checkpoint="{state.trainer_checkpoint}")', "")
    if state.trainer == LIGHTNING and state.trainer_checkpoint:
        return _trainer_snippet(
            "Lightning", "LightningCallback",
            f'trainer.fit(model, ckpt_path="{state.trainer_checkpoint}")',
            "\n# and your dataloaders or datamodule given as before")
    return plain_snippet(path, state)


def _trainer_snippet(trainer: str, callback: str, call: str, also: str) -> Snippet:
    return Snippet("\n".join([
        f"# {trainer} wrote its own checkpoint of this step when mindwatch stopped the run,",
        "# of the same training state as the checkpoint above. Resume from it in the same",
        f"# script, with {callback}(..., resume=True) (the run log goes on){also}:",
        call]), "python")


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
