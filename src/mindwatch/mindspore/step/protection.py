"""What protects a run's updates: the train step ``wrap`` and ``jit_step`` build, a withheld
step computed again (``replay``), and what the anomaly reports say when no such step does
(the user's own train cell)."""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import mindspore as ms
from mindspore import nn

from ...observation import ReplayOutcome
from ...settings import MonitorSettings
from ..probes.activation_probe import ActivationProbes
from ..reading.cb_params import field
from ..reading.cell_reader import TrainCellReader
from ..reading.outputs import read_outputs
from .wrap import MonitoredTrainStep


def build_step(settings: MonitorSettings, network: nn.Cell, optimizer: nn.Optimizer, *,
               probed: nn.Cell | None, activations: Sequence[str] | None,
               attention_logits: Sequence[str] | None, **options: Any) -> MonitoredTrainStep:
    """The ``MonitoredTrainStep`` of ``network``; ``probed``: the model whose sub-Cells
    ``activations`` and ``attention_logits`` name. Raises TypeError or ValueError naming a
    bad argument."""
    probes = None
    if activations or attention_logits:
        if settings.state_interval is None:
            raise ValueError("activations and attention_logits are measured on state steps, "
                             "and state_interval=None turns them off: set state_interval")
        if not isinstance(probed, nn.Cell):
            raise ValueError("jit_step(activations=..., attention_logits=...) needs network=: "
                             "the model forward_fn calls, whose sub-Cells they name")
        probes = ActivationProbes(probed, activations=activations,
                                  attention_logits=attention_logits)
    return MonitoredTrainStep.checked(network, optimizer, grad_explode=settings.grad_explode,
                                      probes=probes, **options)


def unprotected(step: MonitoredTrainStep | None, wrapped: bool, reader: TrainCellReader,
                train_network: Any) -> str | None:
    """Why this set-up cannot withhold an anomalous update, with what to change."""
    if step is None or not wrapped:
        return reader.unprotected(train_network)
    if not step.skip_anomalous:
        return ("monitor.wrap(..., skip_anomalous_updates=False) applies every update: "
                "leave skip_anomalous_updates=True, the default")
    return None


def report_notes(step: MonitoredTrainStep | None) -> list[str]:
    if step is not None and not step.skip_anomalous:
        return ["wrap(skip_anomalous_updates=False): anomalous updates were applied"]
    return []


def replay_outcome(step: MonitoredTrainStep | None, cb: Any) -> ReplayOutcome | None:
    """The step just observed, computed again by ``step`` (``FrameworkHooks.replay``); None
    when the step that ran is not ``step`` (a train cell of another's making)."""
    if step is None or (cb is not None and field(cb, "train_network") not in (None, step)):
        return None
    pynative = ms.get_context("mode") == ms.PYNATIVE_MODE
    outputs = step.replay(getattr(step, "replay_runner", None) if pynative else None)
    if outputs is None:
        return None
    out = read_outputs(outputs, wrapped_by=step)
    return ReplayOutcome(loss=out.loss, grad_norm=out.grad_norm,
                         healthy=step.within_bounds(step.stats_of(outputs)))
