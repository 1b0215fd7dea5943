"""Decoding run-log lines by the block, for the views that read a whole file (``reader.py``).

With msgspec, the lines of a block (a 4 MiB chunk) are decoded by ``map`` into Structs of the
fields the views read (``fast.py``): no Python work per line, which is most of the cost of
reading a log line by line. A ``run``, ``epoch``, ``anomaly``, ``notice`` or ``end`` line is
then decoded again, whole, as ``LineDecoder`` decodes any line, which judges it (they are a
few per ten thousand lines). A ``state`` line is judged by msgspec alone (``StateLine``) and
decoded whole again only for a reader that keeps the model's state (``states=True``): the
report's heatmaps draw one rank, ``summary`` none, and a state line costs a dict of a few
hundred layers' norms. A block that msgspec cannot take whole (a torn or foreign line,
an unknown kind, a line not in ASCII, a blank line) is decoded line by line, each line
msgspec refuses going to the standard path: skips, counts and errors are ``LineDecoder``'s,
line for line.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from itertools import compress, count
from typing import Any, cast

from .. import records
from ..records import Common
from .fast import LONG_LINE, FastParser, might_nest_deeply
from .lines import MAX_LINE_BYTES, LineDecoder, Record


@dataclass
class Batch:
    """What a chunk held, by use: step records (msgspec Structs or dicts), hardware records
    with the number of steps of the batch before each, state records (dicts, or
    ``StateLine`` Structs for a reader that does not keep them), every other record in file
    order, and the number of steps of the batch before each of those (``others_at``: where a
    ``run`` record opens a segment)."""
    steps: list[Any] = field(default_factory=list)
    hardware: list[tuple[int, Any]] = field(default_factory=list)
    states: list[Any] = field(default_factory=list)
    others: list[Record] = field(default_factory=list)
    others_at: list[int] = field(default_factory=list)

    def add(self, record: Record) -> None:
        kind = record.get(Common.KIND)
        if kind == records.STEP:
            self.steps.append(record)
        elif kind == records.HARDWARE:
            self.hardware.append((len(self.steps), record))
        elif kind == records.STATE:
            self.states.append(record)
        else:
            self.others.append(record)
            self.others_at.append(len(self.steps))


class BatchDecoder(LineDecoder):
    """``states``: state records are decoded whole (into ``Batch.states`` as dicts, whose
    "NaN" strings are revived only where the standard path read the line:
    ``FastParser.state_record``); False: they are checked and counted, their layers left
    undecoded."""

    def __init__(self, path: str, *, states: bool = True):
        super().__init__(path)
        self.states = states

    def _state(self, item: Any, raw: bytes, parser: FastParser) -> Any:
        """A state line msgspec checked: the Struct, or the whole record when kept."""
        return parser.state_record(raw) if self.states else item

    def feed_batch(self, data: bytes, batch: Batch) -> None:
        """``feed``, into ``batch``: with msgspec, step and hardware records are Structs whose
        values are not revived yet ("NaN" is still a string)."""
        plain = data.isascii() and self.pending.isascii()      # then so is every line
        lines = self._complete(data)
        parser = self.fast
        start = 0
        while start < len(lines) and (parser is None or self._first):
            self._one(lines[start], batch)         # the first record decides: a run log?
            start += 1
        if start == len(lines):
            return
        assert parser is not None
        rest = lines[start:] if start else lines
        if not (plain and self._block(rest, parser, batch)):
            for raw in rest:
                self._typed(raw, parser, batch)

    def _one(self, raw: bytes | None, batch: Batch) -> None:
        self.line += 1
        record = self._record(raw, self.line)
        if record is not None:
            batch.add(record)

    def _typed(self, raw: bytes | None, parser: FastParser, batch: Batch) -> None:
        if raw is None or len(raw) > MAX_LINE_BYTES or not raw.isascii():
            self._one(raw, batch)
            return
        try:
            item = parser.typed.decode(raw)
        except parser.errors:           # another kind, or a line the standard path judges
            self._one(raw, batch)
            return
        # a shallow state line needs no count of its brackets; any other is measured
        if not (type(item) is parser.StateLine and parser.shallow(item)) \
                and might_nest_deeply(raw):
            self._one(raw, batch)
            return
        self.line += 1
        self.records += 1
        if type(item) is parser.StepLine:
            batch.steps.append(item)
        elif type(item) is parser.StateLine:
            batch.states.append(self._state(item, raw, parser))
        else:
            batch.hardware.append((len(batch.steps), item))

    def _block(self, found: list[bytes | None], parser: FastParser, batch: Batch) -> bool:
        """Decodes ``found`` (ASCII lines) without a Python step per line; False, nothing
        done, when msgspec cannot take them all."""
        if not found or None in found:
            return False
        lines = cast("list[bytes]", found)
        longest = max(map(len, lines))
        if longest > MAX_LINE_BYTES:
            return False
        try:                                 # a blank line fails too
            items = list(map(parser.block.decode, lines))
        except parser.errors:
            return False
        step_line, hardware_line, state_line = parser.StepLine, parser.HardwareLine, \
            parser.StateLine
        # a shallow state line needs no count of its brackets; any other long line is
        # measured (the long ones picked in C: a block holds some 12k lines)
        if longest >= LONG_LINE and any(
                might_nest_deeply(lines[index])
                for index in compress(count(), map(LONG_LINE.__le__, map(len, lines)))
                if not (type(items[index]) is state_line and parser.shallow(items[index]))):
            return False
        first = self.line + 1                # the line number of lines[0]
        steps = batch.steps
        done = 0
        others = [i for i, item in enumerate(items) if type(item) is not step_line]
        self.records += len(items) - len(others)
        for index in others:
            steps += items[done:index]
            item = items[index]
            if type(item) is hardware_line:
                batch.hardware.append((len(steps), item))
                self.records += 1
            elif type(item) is state_line:
                batch.states.append(self._state(item, lines[index], parser))
                self.records += 1
            else:
                record = self._record(lines[index], first + index)
                if record is not None:
                    batch.add(record)
            done = index + 1
        steps += items[done:]
        self.line += len(lines)
        return True
