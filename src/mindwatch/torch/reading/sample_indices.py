"""The sample indices of each training batch, as the ``DataLoader`` itself fetched them: the
``indices`` of a step's identity (contract 1.10, reading/batch.py).

A watched loader's iterators draw their batches' indices from a recorder that stands for
the loader's batch sampler: every index list the iterator takes (``_next_index``: one per
batch, in the order the batches are delivered) is appended to a FIFO, and each training
micro-batch the model sees takes the oldest entry. That point is the loader's own, so it
holds however the batches are loaded and whoever skips some:

- it runs in the main process, with one worker or several: the workers get the index lists
  from it, in order (a loader with ``in_order=False`` delivers them in another order: not
  watched);
- a sampler that skips batches (accelerate's ``SkipBatchSampler``, Hugging Face's resume)
  skipped them before: what is recorded is what is loaded;
- the iterator takes indices ahead of the training loop (the workers' prefetch, accelerate's
  and Lightning's one-batch look-ahead): the FIFO holds them until their batch is trained
  on.

The recorder is put in place of the batch sampler only while the loader makes an iterator
(its ``_get_iterator``): the iterator keeps it (its ``_index_sampler``, read again at each
``_reset``, which persistent workers call each epoch), the loader's own attributes stay as
they were, and the iterator's constructor, which with workers already primes their prefetch,
is caught too. Each new pass (a new iterator, or a reset) empties the FIFO first: what a pass
cut short had fetched is never trained on.

What a micro-batch takes is checked: its sample count (the first dimension of its first
tensor) must be the entry's length. On a mismatch the FIFO and the forwards have drifted
apart (a training forward that was no loader batch), so no index is trusted until the next
pass; an empty FIFO (a pass begun before the loader was watched) gives nothing. Either way
the micro-batch's indices are unknown (None): never another batch's.
"""
from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Iterator
from typing import Any

# entries fetched and not yet trained on: a few hundred is far beyond any prefetch (workers
# times prefetch_factor, plus an accumulation window); more means the loop iterates the loader
# without training forwards, and the oldest are dropped, the pass's indices then unknown
BOUND = 512
_MARK = "_mindwatch_sample_indices"       # on the wrapper of a watched loader's _get_iterator


class SampleIndices:
    """The FIFO of the index lists the watched loaders fetched, oldest first."""

    def __init__(self, bound: int = BOUND):
        self._bound = bound
        self._fifo: deque[list[int] | None] = deque()
        self._lost = False          # until the next pass: the FIFO is not trusted
        self._watched: list[tuple[Any, Any]] = []    # (loader, its own _get_iterator or None)

    def watch(self, loader: Any) -> bool:
        """Record the indices of ``loader``'s batches from its next pass on; False when its
        indices cannot be told (no batch sampler, an iterable dataset, batches delivered out
        of order, or not a DataLoader). Watching a loader again does nothing."""
        base = _base_loader(loader)
        if base is None:
            return False
        own = base.__dict__.get("_get_iterator")
        if own is not None and hasattr(own, _MARK):
            if getattr(own, _MARK) is self:
                return True
            # another monitor's, never closed (a run that ended in an error): this one's now
            getattr(own, _MARK).release(base)
            own = base.__dict__.get("_get_iterator")
        original = base._get_iterator

        def get_iterator() -> Any:
            sampler = base.__dict__["batch_sampler"]
            # the iterator reads the loader's batch sampler once, in its constructor; the
            # attribute is set past DataLoader.__setattr__'s guard and put back at once
            base.__dict__["batch_sampler"] = _Recorder(sampler, self, base)
            try:
                return original()
            finally:
                base.__dict__["batch_sampler"] = sampler
        setattr(get_iterator, _MARK, self)
        base._get_iterator = get_iterator
        self._watched.append((base, own))
        # persistent workers: an iterator made before is reset each epoch, from its own
        # _index_sampler: the recorder from its next pass on
        iterator = getattr(base, "_iterator", None)
        if iterator is not None and not isinstance(iterator._index_sampler, _Recorder):
            iterator._index_sampler = _Recorder(iterator._index_sampler, self, base)
        return True

    def pop(self, samples: int | None) -> list[int] | None:
        """The indices of the next micro-batch trained on, which holds ``samples`` samples;
        None when they are not known."""
        if not self._fifo:
            return None
        entry = self._fifo.popleft()
        if self._lost or entry is None:
            return None
        if samples != len(entry):
            self._lost = True
            return None
        return entry

    def remove(self) -> None:
        """The loaders as they were; iterators made while watched record nothing more."""
        for base, _ in list(self._watched):
            self.release(base)
        self._fifo.clear()

    def release(self, loader: Any) -> None:
        """One watched loader (its base) as it was."""
        for base, own in self._watched:
            if base is loader:
                if own is None:
                    base.__dict__.pop("_get_iterator", None)
                else:
                    base._get_iterator = own
                iterator = getattr(base, "_iterator", None)
                if iterator is not None and isinstance(iterator._index_sampler, _Recorder):
                    iterator._index_sampler = iterator._index_sampler.sampler
        self._watched = [(base, own) for base, own in self._watched if base is not loader]

    def _restart(self, recorder: _Recorder) -> None:
        if self._owns(recorder):
            self._fifo.clear()
            self._lost = False

    def _fetched(self, recorder: _Recorder, batch: Any) -> None:
        if not self._owns(recorder):
            return
        try:
            entry: list[int] | None = [int(index) for index in batch]
        except (TypeError, ValueError):     # no indices (a sampler of keys, not positions)
            entry = None
        self._fifo.append(entry)
        if len(self._fifo) > self._bound:
            self._fifo.popleft()
            self._lost = True

    def _owns(self, recorder: _Recorder) -> bool:
        # an iterator made while watched outlives remove(): it then records nothing
        return any(base is recorder.loader for base, _ in self._watched)


class _Recorder:
    """Stands for the batch sampler in the iterators of a watched loader."""

    def __init__(self, sampler: Iterable[Any], owner: SampleIndices, loader: Any):
        self.sampler, self._owner = sampler, owner
        self.loader = loader

    def __iter__(self) -> Iterator[Any]:
        # called when the pass begins (the iterator's constructor, or its _reset), before its
        # first index is taken
        self._owner._restart(self)
        return self._record(iter(self.sampler))

    def _record(self, indices: Iterator[Any]) -> Iterator[Any]:
        for batch in indices:
            self._owner._fetched(self, batch)
            yield batch

    def __len__(self) -> int:
        return len(self.sampler)        # type: ignore[arg-type]

    def __getattr__(self, name: str) -> Any:
        # what else a caller asks of the sampler (set_epoch, a state_dict)
        if name == "sampler":
            raise AttributeError(name)
        return getattr(self.sampler, name)


def _base_loader(loader: Any) -> Any:
    """The ``torch.utils.data.DataLoader`` that makes the iterators: accelerate's loaders
    (``DataLoaderShard``, ``SkipDataLoader``) wrap one, ``base_dataloader``; None when its
    indices cannot be told."""
    from torch.utils.data import DataLoader, IterableDataset

    # a dispatcher's main process loads every rank's batch and slices it: no rank's own
    if type(loader).__name__ == "DataLoaderDispatcher":
        return None
    for _ in range(4):
        inner = getattr(loader, "__dict__", {}).get("base_dataloader")
        if inner is None:
            break
        loader = inner
    if not issubclass(type(loader), DataLoader):   # type(): an adapter's __class__ lies
        return None
    if loader.__dict__.get("batch_sampler") is None or \
            isinstance(loader.dataset, IterableDataset):
        return None
    if loader.num_workers > 0 and getattr(loader, "in_order", True) is False:
        return None
    return loader
