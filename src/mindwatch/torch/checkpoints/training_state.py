"""What a run's training state is made of under PyTorch: the model (when the user names it),
the protected optimizer and the LR schedulers stepped beside it. Checkpoints and rewind
snapshots both read it here, so they save and restore the same things."""
from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import torch


@dataclass
class TrainingState:
    model: torch.nn.Module | None = None
    optimizer: torch.optim.Optimizer | None = None
    schedulers: list[Any] = field(default_factory=list)

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
