"""What a run's training state is made of under PyTorch: the model (when the user names it),
the protected optimizer and the LR schedulers stepped beside it. Checkpoints and rewind
snapshots both read it here, so they save and restore the same things.

The model is kept as the plain module: ``torch.compile``'s wrapper (``OptimizedModule``)
names every key ``_orig_mod.<name>``, and ``DistributedDataParallel`` ``module.<name>``, so a
checkpoint of either would load only into the same wrapper; the plain module's names load
into the model a resuming script builds, before it compiles or wraps it."""
from __future__ import annotations

import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import torch

HF, LIGHTNING = "hf", "lightning"          # TrainingState.trainer


@dataclass
class TrainingState:
    model: torch.nn.Module | None = None
    optimizer: torch.optim.Optimizer | None = None
    schedulers: list[Any] = field(default_factory=list)
    # The trainer that owns the loop (HF or LIGHTNING; None: a plain loop), and the path its
    # own checkpoint of the step being observed has when a stop asks for a checkpoint
    # (trainers/ set both, and write it, or have it written, once the step's stop is settled):
    # the resume advice names that checkpoint in the trainer's own terms (resume.py).
    trainer: str | None = None
    trainer_checkpoint: str | None = None

    def __setattr__(self, name: str, value: Any) -> None:
        super().__setattr__(name, plain_module(value) if name == "model" else value)

    def parameters(self) -> Iterator[torch.Tensor]:
        """The optimizer's parameters in ``param_groups`` order (the model's otherwise)."""
        if self.optimizer is not None:
            for group in self.optimizer.param_groups:
                yield from group["params"]
        elif self.model is not None:
            yield from self.model.parameters()

    def state_dicts(self) -> dict[str, Any]:
        """``{"model" or "params", "optimizer", "schedulers"}`` as the live objects hold
        them (tensors shared, not copied)."""
        if self.optimizer is None and self.model is None:
            raise RuntimeError("nothing to save: call monitor.protect(optimizer, model=model) "
                               "before training")
        out: dict[str, Any] = {}
        if self.model is not None:
            out["model"] = self.model.state_dict()
        else:
            out["params"] = [p.detach() for p in self.parameters()]
        out["optimizer"] = None if self.optimizer is None else self.optimizer.state_dict()
        out["schedulers"] = [scheduler.state_dict() for scheduler in self.schedulers]
        return out

    def load_state_dicts(self, saved: dict[str, Any]) -> None:
        """Put ``state_dicts()``'s values back, bit for bit."""
        with torch.no_grad():
            if "model" in saved and self.model is not None:
                self.model.load_state_dict(saved["model"])
            elif "params" in saved:
                for param, value in zip(self.parameters(), saved["params"], strict=True):
                    param.copy_(value)
        if self.optimizer is not None and saved.get("optimizer") is not None:
            self.optimizer.load_state_dict(saved["optimizer"])
        for scheduler, state in zip(self.schedulers, saved.get("schedulers", ()), strict=True):
            scheduler.load_state_dict(state)


def plain_module(model: torch.nn.Module | None) -> torch.nn.Module | None:
    """``model`` without the wrappers that rename its keys: ``torch.compile``'s and
    ``DistributedDataParallel``'s, in any nesting (``torch.compile(ddp_model)``)."""
    while True:
        # torch._dynamo is imported by torch.compile: if it is not, no module is compiled
        # (and importing it here would cost a second for nothing)
        eval_frame = sys.modules.get("torch._dynamo.eval_frame")
        if eval_frame is not None and isinstance(model, eval_frame.OptimizedModule):
            model = model._orig_mod
        elif isinstance(model, torch.nn.parallel.DistributedDataParallel):
            model = model.module
        else:
            return model


def ddp_of(model: torch.nn.Module | None) -> torch.nn.parallel.DistributedDataParallel | None:
    """The ``DistributedDataParallel`` among ``model``'s wrappers (``torch.compile(ddp)``
    too), whose communication hook measures each rank's own gradient norm; None."""
    while model is not None and not isinstance(model, torch.nn.parallel.DistributedDataParallel):
        inner = plain_module(model)
        if inner is model:
            return None
        model = getattr(model, "_orig_mod", None)
    return model
