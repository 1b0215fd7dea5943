"""Character-level data for the ``mindwatch demo`` language model.

The corpus ships inside the package so the demo runs offline and without any
download step; character tokens keep the vocabulary tiny (~50 symbols), which
is what lets a 300-step run on a laptop CPU show a clearly falling loss.
"""

from __future__ import annotations

import functools
from importlib import resources

import numpy as np

__all__ = ["corpus_text", "decode", "encode", "make_dataset", "vocab", "vocab_size"]


@functools.lru_cache(maxsize=1)
def corpus_text() -> str:
    """Return the bundled corpus (read once; it never changes at runtime)."""
    return resources.files(__package__).joinpath("corpus.txt").read_text(encoding="utf-8")


@functools.lru_cache(maxsize=1)
def vocab() -> tuple[str, ...]:
    """Sorted characters of the corpus; sorting makes token ids stable across runs."""
    return tuple(sorted(set(corpus_text())))


def vocab_size() -> int:
    """Number of distinct tokens, i.e. the size the embedding and head must have."""
    return len(vocab())


@functools.lru_cache(maxsize=1)
def _char_to_id() -> dict[str, int]:
    return {ch: i for i, ch in enumerate(vocab())}


def encode(text: str) -> np.ndarray:
    """Map text to int32 token ids; raises KeyError on characters outside the corpus."""
    table = _char_to_id()
    return np.fromiter((table[ch] for ch in text), dtype=np.int32, count=len(text))


def decode(ids) -> str:
    """Inverse of :func:`encode`, handy for printing samples in the demo."""
    chars = vocab()
    return "".join(chars[int(i)] for i in np.asarray(ids).reshape(-1))


@functools.lru_cache(maxsize=1)
def _corpus_ids() -> np.ndarray:
    ids = encode(corpus_text())
    ids.setflags(write=False)  # shared via the cache, so guard against accidental edits
    return ids


def make_windows(*, batch_size: int, seq_len: int, num_batches: int, seed: int):
    """Sample ``num_batches`` batches of random windows as two int32 arrays.

    Returns ``(tokens, targets)`` of shape ``[num_batches, batch_size, seq_len]``,
    where ``targets`` is ``tokens`` shifted one character to the left. All the
    randomness is drawn up front from a seeded generator, so the same seed always
    gives the same batches no matter how the dataset pipeline schedules work.
    """
    for name, value in (("batch_size", batch_size), ("seq_len", seq_len),
                        ("num_batches", num_batches)):
        if int(value) < 1:
            raise ValueError(f"{name} must be >= 1, got {value!r}")
    ids = _corpus_ids()
    # Each window needs seq_len inputs plus one extra character for the last target.
    max_start = len(ids) - seq_len - 1
    if max_start < 0:
        raise ValueError(f"seq_len={seq_len} is longer than the corpus ({len(ids)} chars)")
    rng = np.random.default_rng(seed)
    starts = rng.integers(0, max_start + 1, size=(num_batches, batch_size))
    # Fancy indexing builds all windows at once instead of a Python loop per sample.
    idx = starts[..., None] + np.arange(seq_len + 1)
    windows = ids[idx]
    return np.ascontiguousarray(windows[..., :-1]), np.ascontiguousarray(windows[..., 1:])


def make_dataset(*, batch_size: int = 16, seq_len: int = 48, num_batches: int = 300, seed: int = 0):
    """Build a MindSpore dataset of ``num_batches`` pre-batched ``(tokens, targets)``.

    Each row is already a whole ``[batch_size, seq_len]`` int32 batch, so callers must
    not call ``.batch()`` on it again. Shuffling is off because the windows are
    already random; turning it on would make order depend on the dataset's own seed.
    """
    import mindspore.dataset as ds  # lazy: mindwatch core must import without MindSpore

    tokens, targets = make_windows(
        batch_size=batch_size, seq_len=seq_len, num_batches=num_batches, seed=seed
    )
    return ds.NumpySlicesDataset(
        (tokens, targets),
        column_names=["tokens", "targets"],
        shuffle=False,
        num_parallel_workers=1,
    )
