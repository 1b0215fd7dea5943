"""How ``TrainMonitor`` reads a train cell it did not build: MindSpore's own, the user's, or
a framework's on MindSpore (MindFormers subclasses this in ``mindwatch.mindformers``)."""
from __future__ import annotations

from typing import Any

from ..checkpoints.checkpoint import resume_snippet
from .outputs import StepOutputs, read_outputs


class TrainCellReader:
    """The step's outputs, what the cell decided, and what the user can change so that it
    withholds anomalous updates. A subclass knows one framework's train cells."""

    def read(self, outputs: Any, cell: Any) -> StepOutputs:
        """The outputs of ``cell`` (``cb_params.train_network``) for one step, as plain
        numbers."""
        return read_outputs(outputs)

    def protected_step(self, cell: Any) -> Any:
        """``cell`` when it is a train cell of mindwatch's built by a framework (it decides
        in its graph and reads like ``wrap``'s step), else None."""
        return None

    def layer_names(self, cell: Any) -> list[str] | None:
        """The parameter names, in the order of the per-parameter squared norms ``read``
        returns (``param_sq_norms``); None when it returns none."""
        return None

    def resume_hint(self, path: str) -> str:
        """Code that resumes from the checkpoint at ``path``, for the anomaly report."""
        return resume_snippet(path)

    def grad_checks_off(self, cell: Any) -> str:
        """Said once when the cell returns no gradient norm: how to turn the checks on."""
        return ("gradient checks are off: the train cell does not return gradient norms. "
                "Build the train step with monitor.wrap(net_with_loss, optimizer) and pass "
                "it to Model(train_step) to turn them on")

    def unprotected(self, cell: Any) -> str:
        """Why this cell applies anomalous updates, with what to change."""
        return ("the train cell does not withhold anomalous updates: build it with "
                "monitor.wrap(net_with_loss, optimizer) and train Model(train_step), or "
                "monitor.jit_step(forward_fn, optimizer) in a custom loop")
