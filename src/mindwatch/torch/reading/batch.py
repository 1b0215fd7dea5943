"""A protected step's batch identity (contract 1.10, basics/batch_identity.py), taken where
the batch is: a forward pre-hook on the model ``protect(..., model=)`` was given (Hugging
Face's model too), or, under Lightning, the batch its callback is handed.

Each training forward (the plain model's ``training``; an evaluation's forward, or a
replay's, is left out) gives, for each tensor among its inputs (the positional ones in
order, then the keyword ones by name), the sum and the sum of squares of its finite elements
and how many are not finite, the values in float32 on the tensor's device, their sums
accumulated in float64 (``host_numbers``'s definition: the host and the device agree to 6
digits, whatever the order of the elements, even where a zero-mean input's sum cancels;
float32 accumulation would not), and its element count, which the host knows. Under gradient
accumulation the step's numbers are the sums over its micro-batches (the forwards since the
last optimizer step): sums, whatever the order of the micro-batches and of the samples
within them, so a step's fingerprint is its whole batch's.

The numbers reach the host with the protected step's own (reading/outputs.py): summed over
the micro-batches on the device, appended to the step's vector (each float64 sum as two
float32 values), read by ``observe``'s one read: no read of their own. A run that knows bad
batches (``resume=True``, ``skip_batches``, or one entered earlier in the run) needs them
before the update instead, at the optimizer's step, to withhold a known batch's: on CUDA
each forward then starts their copy to the host (pinned, non-blocking) right after them,
before its own kernels, with an event behind it, so the step waits for those few kernels
only, never for the forward or the backward. Lightning hands the batch to its callback
(``given``), whose tensors then stand for the model's inputs.

The identity's ``indices`` are the samples' indices where a watched ``DataLoader`` fetched
them (sample_indices.py: ``protect(..., data=)``, HF's and Lightning's training loaders):
each micro-batch counted here takes the next index list the loader fetched, checked against
its sample count; a step's indices are its micro-batches' in order, None when any of them
is not known (never a partial list). Without a watched loader they are None.
"""
from __future__ import annotations

import struct
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import torch

from ...basics.batch_identity import identity
from ...decisions.bad_batches import KNOWN_BAD_BATCH, BadBatches
from .outputs import PendingStep
from .sample_indices import SampleIndices
from .samples import samples_in

_ON_DEVICE = 3          # numbers per input the device computes; the 4th, its size, the host's


class _Part:
    """One training forward's numbers: 3 per input on the device, in float64 (the element
    count is the host's), and on a CUDA device, when the run knows bad batches, their copy
    on its way to the host with the event that says it arrived."""

    def __init__(self, numbers: torch.Tensor, numels: list[int], eager: bool,
                 indices: list[int] | None = None):
        self.numbers, self.numels = numbers, numels
        self.indices = indices          # the samples' indices, where a loader told them
        self.copy: torch.Tensor | None = None
        self.event: Any = None
        if eager and numbers.device.type == "cuda":
            self.copy = numbers.to("cpu", non_blocking=True)          # pinned
            self.event = torch.cuda.Event()
            self.event.record()

    def host(self) -> list[float]:
        if self.copy is not None:
            self.event.synchronize()           # the numbers' kernels only, queued before
            return [float(v) for v in self.copy.tolist()]
        return [float(v) for v in self.numbers.tolist()]


class StepBatch:
    """The micro-batches of one optimizer step (gradient accumulation: several)."""

    def __init__(self, parts: list[_Part]):
        self._parts = parts
        self.size = max(len(part.numels) for part in parts) * _ON_DEVICE
        self._values: list[float] | None = None      # the device's numbers, read
        self._identity: dict[str, Any] | None = None

    @property
    def read(self) -> bool:
        return self._values is not None

    @property
    def read_size(self) -> int:
        """How many float32 values ``on_device`` gives."""
        return 2 * self.size

    def on_device(self, device: torch.device) -> torch.Tensor:
        """The step's device numbers summed over its micro-batches, for the protected
        step's float32 vector (read with its numbers, in ``observe``): each float64 sum as
        two float32 values, its rounding and what the rounding left (``given`` adds them)."""
        dtype = self._parts[0].numbers.dtype
        if len(self._parts) == 1:               # no gradient accumulation: nothing to sum
            total = self._parts[0].numbers.to(device, non_blocking=True)
        else:
            total = torch.zeros(self.size, dtype=dtype, device=device)
            for part in self._parts:
                total[:len(part.numbers)] += part.numbers.to(device, dtype, non_blocking=True)
        high = total.to(torch.float32)
        return torch.cat([high, (total - high.to(dtype)).to(torch.float32)])

    def given(self, values: list[float]) -> None:
        """``on_device``'s values, as the protected step's one read brought them."""
        self._values = [high + low for high, low in zip(values[:self.size],
                                                        values[self.size:], strict=True)]

    def numbers(self) -> list[float]:
        """The step's numbers on the host, 4 per input (``host_numbers``'s): those the
        protected step read, else read now (the copies made for it, on CUDA)."""
        if self._values is None:
            values = [0.0] * self.size
            for part in self._parts:
                for index, value in enumerate(part.host()):
                    values[index] += value
            self._values = values
        numels = [0] * (self.size // _ON_DEVICE)
        for part in self._parts:
            for index, numel in enumerate(part.numels):
                numels[index] += numel
        found: list[float] = []
        for index, numel in enumerate(numels):
            found += [_float32(v) for v in
                      self._values[index * _ON_DEVICE:(index + 1) * _ON_DEVICE]]
            found.append(float(numel))
        return found

    def identity(self) -> dict[str, Any]:
        """The ``batch`` field of the step's record (computed once)."""
        if self._identity is None:
            self._identity = identity(self.numbers(), self.indices())
        return self._identity

    def indices(self) -> list[int] | None:
        """The micro-batches' sample indices, in order; None unless every one's is known."""
        found: list[int] = []
        for part in self._parts:
            if part.indices is None:
                return None
            found += part.indices
        return found


class BatchReading:
    """The forward pre-hook on ``model`` as the loop calls it (a DDP or ``torch.compile``
    wrapper: the hook runs outside the compiled graph), and the micro-batches it saw since
    the last step; ``plain``: the module inside, whose ``training`` says a training forward.
    ``eager()``: whether the run knows bad batches (the step will read its numbers before
    the update: on CUDA their copy to the host starts with the forward)."""

    def __init__(self, model: torch.nn.Module, plain: torch.nn.Module,
                 eager: Callable[[], bool] = lambda: False,
                 indices: SampleIndices | None = None):
        self._plain = plain
        self._indices = indices          # the watched loaders' index lists, oldest first
        self._parts: list[_Part] = []
        self._paused = False
        self._from_model = True         # False: the trainer hands the batch (``given``)
        self._eager = eager
        self._handle = model.register_forward_pre_hook(self._forward, with_kwargs=True)

    def remove(self) -> None:
        self._handle.remove()

    def take(self) -> StepBatch | None:
        """The micro-batches since the last call, as one step's (None: no training forward)."""
        parts, self._parts = self._parts, []
        return StepBatch(parts) if parts else None

    @contextmanager
    def paused(self) -> Iterator[None]:
        """Forwards that are no new batch (a withheld step's replay) left out."""
        self._paused, was = True, self._paused
        try:
            yield
        finally:
            self._paused = was

    def given(self, batch: Any) -> None:
        """A training batch as the trainer hands it (Lightning's ``on_train_batch_start``,
        whose module's ``training_step`` need not call its ``forward``): its tensors, in
        sequences in order and in mappings by key, in place of the model's inputs from
        now on."""
        self._from_model = False
        self._add(list(_tensors_in(batch)), samples_in(batch))

    def _forward(self, module: torch.nn.Module, args: tuple, kwargs: dict) -> None:
        if (not self._plain.training or self._paused or not self._from_model
                or _compiling()):
            return
        tensors = [t for t in (*args, *(kwargs[k] for k in sorted(kwargs)))
                   if isinstance(t, torch.Tensor)]
        self._add(tensors, samples_in(tensors))

    def _add(self, tensors: list[torch.Tensor], samples: int | None) -> None:
        if not tensors:
            return
        # one loader batch per micro-batch: its entry is taken even where it is not used
        indices = self._indices.pop(samples) if self._indices is not None else None
        device = next((t.device for t in tensors if t.device.type != "cpu"),
                      tensors[0].device)
        with torch.no_grad():
            found = [_tensor_numbers(t).to(device, non_blocking=True) for t in tensors]
            numbers = found[0] if len(found) == 1 else torch.cat(found)
        self._parts.append(_Part(numbers, [t.numel() for t in tensors], self._eager(),
                                 indices))


def _tensors_in(batch: Any) -> Iterator[torch.Tensor]:
    if isinstance(batch, torch.Tensor):
        yield batch
    elif isinstance(batch, Mapping):
        for key in sorted(batch, key=str):
            yield from _tensors_in(batch[key])
    elif isinstance(batch, (list, tuple)):
        for item in batch:
            yield from _tensors_in(item)


def _tensor_numbers(tensor: torch.Tensor) -> torch.Tensor:
    """Sum and sum of squares of the finite elements (float32 values, accumulated in float64
    and rounded to float32: ``host_numbers``'s), non-finite count. Integer and boolean
    inputs (token ids, masks, labels: most of a language model's) are all finite: their
    values go to float32 (as the host's, exact below 2**24) and on, with no finiteness
    mask: five kernels in place of ten, which on a CPU step is most of this hook's cost."""
    values = tensor.detach().reshape(-1)
    wide_dtype = torch.float32 if values.device.type == "mps" else torch.float64
    if values.dtype.is_floating_point or values.dtype.is_complex:
        values = values.to(torch.float32)
        finite = torch.isfinite(values)
        wide = torch.where(finite, values, 0.0).to(wide_dtype)
        bad = (finite.numel() - finite.sum()).to(wide_dtype)
    else:
        wide = values.to(torch.float32).to(wide_dtype)
        bad = wide.new_zeros(())
    return torch.stack([wide.sum(), torch.dot(wide, wide), bad])


def _float32(value: float) -> float:
    """``value`` rounded to float32, as ``host_numbers`` gives its sums."""
    return float(struct.unpack("f", struct.pack("f", value))[0])


def _compiling() -> bool:
    compiler: Callable[[], bool] | None = getattr(getattr(torch, "compiler", None),
                                                  "is_compiling", None)
    return bool(compiler()) if compiler is not None else False


def known_batch(ledger: BadBatches) -> Callable[[StepBatch], bool]:
    """The protected step's question before it applies an update: whether the run knows bad
    batches at all (no read to the host otherwise), then whether this is one of them."""
    return lambda batch: bool(ledger.entries) and ledger.known(batch.identity()) is not None


def known_ledger(ledger: BadBatches) -> Callable[[], bool]:
    return lambda: bool(ledger.entries)


def batch_fields(pending: PendingStep) -> dict[str, Any]:
    """``observe``'s arguments for the step's batch (after ``pending.read()``): its
    identity, and why its update was withheld where its batch, or another rank's, was a
    known bad one."""
    fields: dict[str, Any] = {}
    if pending.batch is not None:
        fields["batch"] = pending.batch.identity()
    if pending.known_bad:
        fields["skip_reason"] = KNOWN_BAD_BATCH
    return fields
