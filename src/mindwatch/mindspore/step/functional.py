"""``monitor.jit_step``: the functional style of MindSpore 2.x tutorials, protected like ``wrap``.

The tutorials train with ``grad_fn = value_and_grad(forward_fn, None, optimizer.parameters)``
and an ``@ms.jit`` step that calls ``optimizer(grads)``; the gradients never leave that step,
so nothing outside it can measure them or hold the update back. ``JitTrainStep`` is that
step built for the user: the same forward function, compiled once, with wrap's in-graph
global norm and withheld update (``MonitoredTrainStep`` over a Cell that calls the forward
function). Each call returns the step's outputs already converted to Python numbers, for
``monitor.observe(step=..., outputs=...)``.
"""
from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import mindspore as ms
from mindspore import nn

from ..reading.batch import BatchGuard
from ..reading.outputs import StepOutputs, read_outputs
from .wrap import MonitoredTrainStep


class ForwardCell(nn.Cell):
    """A Cell around a forward function (``forward_fn(*batch) -> loss`` or ``(loss, *aux)``)
    that closes over the model and the loss function, as the tutorials write it."""

    def __init__(self, forward_fn: Callable[..., Any]):
        super().__init__(auto_prefix=False)
        self.forward_fn = forward_fn

    def construct(self, *inputs):
        return self.forward_fn(*inputs)


class JitTrainStep:
    """One compiled training step; ``step(*batch)`` returns its ``StepOutputs`` (``loss``,
    ``grad_norm``, ``lr_groups``, ``skipped``, ``aux``: the forward's other outputs as
    Tensors with ``has_aux=True``, ``data_time_s``: the time from the previous call's return
    to this call, in which the loop fetched the batch). ``cell`` is the ``MonitoredTrainStep``
    (save it with ``mindspore.save_checkpoint`` to keep the optimizer state too).
    ``batches``: the monitor's ``BatchGuard`` (reading/batch.py): each step's inputs
    identified, a known bad batch's update withheld; ``next_step()``: the step a call trains."""

    def __init__(self, cell: MonitoredTrainStep, *,
                 state_due: Callable[[], bool] = lambda: False,
                 clock: Callable[[], float] = time.perf_counter,
                 batches: BatchGuard | None = None, next_step: Callable[[], int] = lambda: 0):
        self.cell, self._state_due, self._clock = cell, state_due, clock
        self._batches, self._next_step = batches, next_step
        self._returned: float | None = None

        # PyNative runs a Cell op by op; the tutorials' @ms.jit compiles the step into one
        # graph, and so does this. In GRAPH_MODE the Cell compiles on its own.
        @ms.jit
        def compiled(*inputs):
            return cell(*inputs)

        self._compiled = compiled
        object.__setattr__(cell, "replay_runner", compiled)    # PyNative: the compiled step
        self._compiled_state: Callable[..., Any] | None = None

    def __call__(self, *inputs: Any) -> StepOutputs:
        """``state_due()`` says whether this step is a state step (the monitor's interval):
        it then runs the state graph, whose vector the monitor reads after ``observe``."""
        start = self._clock()
        if self._batches is None:
            outputs = self._step(inputs)
        else:
            step = self._next_step()
            self._batches.begin(step, inputs, self.cell)
            try:
                outputs = self._step(inputs)
            finally:
                self._batches.release()
            self._batches.mark(outputs, step)
        if self._returned is not None:
            outputs.data_time_s = start - self._returned
        self._returned = self._clock()
        return outputs

    def _step(self, inputs: tuple[Any, ...]) -> StepOutputs:
        cell = self.cell
        object.__setattr__(cell, "last_inputs", inputs)         # for replay (wrap.py)
        if ms.get_context("mode") == ms.GRAPH_MODE:
            cell.state_due = self._state_due()
            return read_outputs(cell(*inputs), wrapped_by=cell)
        if not self._state_due():
            return read_outputs(self._compiled(*inputs), wrapped_by=cell)
        if self._compiled_state is None:
            variant = cell.state_variant()

            @ms.jit
            def compiled_state(*batch):
                return variant(*batch)

            self._compiled_state = compiled_state
        with cell.recording():
            outputs = self._compiled_state(*inputs)
        return read_outputs(cell.keep_state(outputs), wrapped_by=cell)
