"""The step's batch on the MindSpore side (issue #46): its identity, and a known bad one's
update withheld before it is applied.

- Identity: in non-sink mode ``Model.train``/``fit`` set ``cb_params.train_dataset_element``
  to the step's inputs (a tuple of Tensors) just before ``on_train_step_begin`` (MindSpore
  2.10, train/model.py ``_train_process``); ``jit_step``'s step gets them as its arguments.
  Their identity is ``basics.batch_identity``'s, computed on the host: each input's
  ``asnumpy()`` (the dataset's Tensors are still host memory before the step runs: no device
  copy, no wait; a ``jit_step`` input the loop already moved to a device is copied back) and
  ``host_numbers``' sums over it (float32 values, float64 accumulation). Measured on a shared
  2-core x86 host, every step: 0.14 ms for a batch of 8x4096 int32 tokens (0.3 ms with its
  8x4096 labels, ~4 ns an element); 3 ms for 64x4096 float32 features (262k elements, whose
  float64 copies leave the cache). An input that is not numbers (strings) is left out.
  Sample indices: a MindSpore dataset's rows carry no source index (nothing in its iterator
  says which rows of the source a batch came from without adding a column to the pipeline),
  so they are ``None``. Dataset sink mode feeds no element to the callback (the data goes
  through the device queue): there is no identity then, and the ledger cannot be honoured.
- Withholding: the protected step's in-graph verdict (step/verdict.py) applies the update
  only when the stats are within the bounds the host writes between steps. For a known bad
  batch the loss bound is set below every value for this one step (``withholding``, what a
  replay uses) and restored once its outputs are read: no graph change, no recompilation, two
  small host-to-device writes on that step only. The host's mirror of the verdict, read
  before the restore, says the update was withheld. Under data parallelism the ranks share
  the verdict, so every rank withholds it, and their exchange counts the ranks that withheld
  on purpose: every rank reports the step withheld for a known batch (``held``), none an
  anomaly. Without a protected step (a train cell not of
  mindwatch's making, ``skip_anomalous_updates=False``) nothing can be withheld: one notice
  says so, and the step is not reported withheld.
"""
from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ...basics.batch_identity import host_array, host_numbers, identity
from ...decisions.bad_batches import KNOWN_BAD_BATCH

if TYPE_CHECKING:
    from ...monitor import Monitor
    from .outputs import StepOutputs

NOT_PROTECTED = ("step {step}: its batch is a known bad one ({fingerprint}, bad at step "
                 "{bad_step}), but this train cell cannot withhold an update (only monitor.wrap's "
                 "and jit_step's protected step can, with skip_anomalous_updates=True): it is "
                 "applied; said once")
SINK_MODE = ("bad batches (skip_batches, or resume's bad_batches.jsonl): dataset sink mode "
             "feeds no batch to the callback, so no batch is identified and none withheld; "
             "train with dataset_sink_mode=False to have them withheld")


def host_identity(inputs: Sequence[Any] | None) -> dict[str, Any] | None:
    """The identity of a step's inputs (Tensors or arrays), or None without any. Indices:
    None (MindSpore datasets give none, see above)."""
    if not inputs:
        return None
    arrays = [array for array in map(host_array, inputs) if array is not None]
    return identity(host_numbers(arrays), None) if arrays else None


class BatchGuard:
    """One per monitor: ``begin`` at the step's start (its inputs, the train cell that runs
    it), ``mark`` once the step's outputs are read (the bounds restored, the outputs given
    the step's ``batch`` and ``skip_reason``). ``withheld`` stays set until the next step
    begins (the replay hook reads it: a known batch's step is not computed again)."""

    def __init__(self, monitor: Monitor):
        self._monitor = monitor
        self._held: contextlib.ExitStack | None = None
        self._said_unprotected = False
        self._said_sink = False
        self.step: int | None = None    # the step begun last
        self.batch: dict[str, Any] | None = None
        self.withheld = False           # this step's update withheld for its known batch

    def begin(self, step: int, inputs: Sequence[Any] | None, cell: Any) -> None:
        self.release()
        self.step, self.withheld = step, False
        self.batch = host_identity(inputs)
        entry = self._monitor.bad_batches.known(self.batch)
        if entry is None:
            return
        verdict = _verdict_of(cell)
        if verdict is None:
            if not self._said_unprotected:
                self._said_unprotected = True
                self._monitor.notice(NOT_PROTECTED.format(
                    step=step, fingerprint=entry.get("fingerprint"),
                    bad_step=entry.get("step")))
            return
        self._held = contextlib.ExitStack()
        self._held.enter_context(verdict.withholding())
        self.withheld = True

    def sink_mode(self) -> None:
        """A step of dataset sink mode: no batch to identify (said once, when a ledger was
        given)."""
        self.release()
        self.step, self.batch, self.withheld = None, None, False
        if self._monitor.bad_batches.entries and not self._said_sink:
            self._said_sink = True
            self._monitor.notice(SINK_MODE)

    def release(self) -> None:
        """The bounds as they were before ``begin`` (after the step's outputs were read)."""
        held, self._held = self._held, None
        if held is not None:
            held.close()

    def mark(self, out: StepOutputs, step: int | None) -> None:
        """After ``step``'s outputs were read (the host's mirror of the verdict with the
        bounds the step ran under): restore the bounds, and give ``out`` the step's batch and
        skip reason (nothing when ``step`` is not the one begun, e.g. a callback that missed
        its begin)."""
        self.release()
        if step is None or step != self.step:
            return
        out.batch = self.batch
        # the graph's verdict, as the host mirrors it; under data parallelism another rank's
        # known batch withholds this rank's update too (the ranks' exchange counts them)
        if out.skipped and (self.withheld or out.held):
            out.skip_reason = KNOWN_BAD_BATCH
            self.withheld = True        # on every rank: none computes the step again


def _verdict_of(cell: Any) -> Any:
    """The in-graph verdict of a protected step (wrap's, jit_step's, MindFormers' of
    mindwatch's making), None when the cell cannot withhold an update."""
    if cell is None or getattr(cell, "skip_anomalous", True) is False:
        return None
    try:
        verdict = getattr(cell, "verdict", None)
    except AttributeError:
        return None
    return verdict if hasattr(verdict, "withholding") else None
