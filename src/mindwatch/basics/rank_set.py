"""A set of ranks as a short text, as Slurm writes node lists: ``"0-7,13"``. A record or a
line that names the ranks of a job of thousands names them in a few characters."""
from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any


def _runs(ranks: Iterable[int]) -> Iterator[tuple[int, int]]:
    """(first, last) of each run of consecutive ranks, ascending; duplicates dropped."""
    start = previous = None
    for rank in sorted(set(ranks)):
        if previous is not None and rank == previous + 1:
            previous = rank
            continue
        if start is not None and previous is not None:
            yield start, previous
        start = previous = rank
    if start is not None and previous is not None:
        yield start, previous


def rank_set(ranks: Iterable[int]) -> str:
    """``[0, 1, 2, 3, 7]`` -> ``"0-3,7"``; duplicates and order do not matter; "" for none."""
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in _runs(ranks))


def rank_list_text(ranks: Iterable[int], limit: int = 60) -> str:
    """For people: ``"0, 1"`` or ``"0-7, 13"`` (runs of three or more as ranges), cut at
    ``limit`` characters with the count of ranks (``"0, 2, 4, ... (2048 ranks)"``)."""
    parts: list[str] = []
    count = 0
    for first, last in _runs(ranks):
        count += last - first + 1
        parts += [f"{first}-{last}"] if last - first >= 2 else \
            [str(r) for r in range(first, last + 1)]
    text = ", ".join(parts)
    if len(text) <= limit:
        return text
    return text[:limit].rsplit(", ", 1)[0] + f", ... ({count} ranks)"


def parse_rank_set(text: str) -> list[int]:
    """``"0-3,7"`` -> ``[0, 1, 2, 3, 7]``; raises ValueError naming the part it cannot read."""
    ranks: list[int] = []
    for part in filter(None, (piece.strip() for piece in text.split(","))):
        first, dash, last = part.partition("-")
        try:
            start, end = int(first), int(last) if dash else int(first)
        except ValueError:
            raise ValueError(f"rank set {text!r}: {part!r} is neither a rank nor a range "
                             "like 0-7") from None
        if start < 0 or end < start:
            raise ValueError(f"rank set {text!r}: {part!r} is not an ascending range of "
                             "non-negative ranks")
        ranks.extend(range(start, end + 1))
    return sorted(set(ranks))


def ranks_in(value: Any) -> list[int]:
    """The ranks of a record's rank set (``parse_rank_set``); none for null or a value that
    is not one: a log is data, and a view reads what it can."""
    try:
        return parse_rank_set(str(value)) if value else []
    except ValueError:
        return []
