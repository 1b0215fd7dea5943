"""The optional fast JSON parser of run-log lines: msgspec (``pip install 'mindwatch[fast]'``).

Without it every line goes through ``records.decode`` (the standard ``json`` module). With it,
results are identical, by construction: msgspec answers only for lines it reads exactly as
the standard path would, and hands every other line to the standard path, which decides
(and raises the same exception, with the same message, for a bad line):

- a line that is not pure ASCII (the standard path checks its UTF-8 first; msgspec does not
  check the strings it skips);
- a line that might nest deeper than ``SAFE_DEPTH`` (``records.decode`` revives values
  recursively and must hit Python's recursion limit where it always did);
- anything msgspec refuses: malformed JSON, a missing required field, a number beyond a
  double (the standard path reads 1e400 as inf), a lone surrogate escape, a repeated ``kind``.

Two ways in with msgspec: ``decode_record`` returns the whole record as a dict (the live
view, the lazy ``RankLog.records``); ``typed`` (and ``block``) decode ``step`` and
``hardware`` lines into Structs of the fields the views read (``STEP_FIELDS``,
``HOST_FIELDS``, ``DEVICE_FIELDS``), skipping the rest, and leave non-finite strings ("NaN")
for ``columns.revived``. A ``state`` line (tens of KB: a few hundred layers' norms) becomes
a ``StateLine`` (``state_line``): the fields records.py declares for it, JSON scalars, and
its layers (and watched cells) as the bytes of each one's object, validated but not built
(``msgspec.Raw``). msgspec judges it as the standard path does (strict JSON, every required
field) and its depth needs no count of its brackets (a few hundred layers have a brace
each: counted, and measured past SAFE_DEPTH brackets, that cost more than the decoding): a
line nests two levels plus its longest layer's, and a layer's bytes nest at most half their
length (``shallow``). A state line with anything else (an unknown field, a nested value
outside the layers) is the standard path's to read. Without msgspec, ``standard_record`` is
``records.decode`` minus its revival walk on a line that has nothing to revive.

``MINDWATCH_JSON=json`` in the environment turns msgspec off (to compare the two paths).
"""
from __future__ import annotations

import json
import os
from functools import reduce
from operator import or_
from typing import Any

from .. import records
from ..records import Common, Device, Hardware, State, Step

try:
    import msgspec
except ImportError:        # the standard path only
    msgspec = None  # type: ignore[assignment]

ENV = "MINDWATCH_JSON"
# records.decode recurses twice per nesting level (function and comprehension): 2 * 250
# frames stay well inside the default limit of 1000 from any sane call depth. A line shorter
# than 2 * SAFE_DEPTH bytes cannot nest that deep, so the usual lines skip the count.
SAFE_DEPTH = 250
LONG_LINE = 2 * SAFE_DEPTH
# A state line whose every layer's (and cell's) object is shorter nests under SAFE_DEPTH:
# two levels (the record, its layers) plus at most one per two bytes of the layer's.
SHALLOW_ENTRY = 2 * (SAFE_DEPTH - 2)

# What the views read of the two frequent kinds; every required field is declared too, so
# that msgspec refuses a line that lacks one (records.problems then says which).
STEP_FIELDS = (Step.STEP, Step.LOSS, Step.LOSS_SMOOTH, Step.LR, Step.GRAD_NORM,
               Step.STEP_TIME_S, Step.SAMPLES_PER_S, Step.TOKENS_PER_S, Step.MFU, Step.ETA_S)
# Read of a segment's first step record only, never a column (runlog/segments.py)
SEGMENT_STEP_FIELDS = (Step.STEPS_COVERED,)
# Summed per rank, never a column: the goodput's stragglers (runlog/step_times.py)
TIMING_STEP_FIELDS = (Step.DATA_TIME_S,)
HOST_FIELDS = (Hardware.CPU_PERCENT, Hardware.MEM_USED_GB, Hardware.RSS_GB)
DEVICE_FIELDS = (Device.UTIL_PERCENT, Device.MEM_USED_MB, Device.TEMP_C)
_COMMON = tuple(name for name in Common.REQUIRED if name != Common.KIND)   # kind is the tag

# records.decode's own revival of "NaN"/"Infinity"/"-Infinity": one definition of the rule.
revive = records.revive


# Every byte but the brackets, for bytes.translate to delete.
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")


def might_nest_deeply(raw: bytes) -> bool:
    """Whether the line might nest ``SAFE_DEPTH`` levels or more. Counting its brackets
    answers for most lines; a line with that many (a state record of a few hundred layers
    has one brace each) is measured: its strings cut out at their quotes (exact in a line
    without a backslash; with one, the answer is yes), then the innermost pairs removed
    pass by pass, at most two levels a pass. Unbalanced brackets: yes (not JSON anyway)."""
    if len(raw) < LONG_LINE or raw.count(b"[") + raw.count(b"{") < SAFE_DEPTH:
        return False
    if b"\\" in raw:
        return True
    brackets = b"".join(raw.split(b'"')[0::2]).translate(None, _NOT_BRACKETS)
    for _ in range(SAFE_DEPTH // 2 - 1):
        if not brackets:
            return False
        shorter = brackets.replace(b"{}", b"").replace(b"[]", b"")
        if len(shorter) == len(brackets):
            return True
        brackets = shorter
    return True


def _refuse(name: str) -> None:
    raise ValueError(name)


_STRICT = json.JSONDecoder(parse_constant=_refuse)


def standard_record(raw: bytes) -> dict[str, Any]:
    """``records.decode(raw.decode("utf-8"))`` with the standard json module, skipping its
    revival walk (a copy of the record, 40% of its cost) for a line where it has nothing to
    revive; any other line, and any error, is ``records.decode``'s."""
    text = raw.decode("utf-8")
    if not _needs_revival(raw) and not might_nest_deeply(raw):
        try:
            value = _STRICT.decode(text)
        except (ValueError, RecursionError):
            value = None
        if type(value) is dict:
            return value
    return records.decode(text)


def _needs_revival(raw: bytes) -> bool:
    """Whether a string of the line could read "NaN", "Infinity" or "-Infinity" (written
    plainly, or with escapes)."""
    return b'"NaN"' in raw or b'Infinity"' in raw or b"\\" in raw


class FastParser:
    """msgspec decoders for run-log lines (one per process; building them takes ~1 ms)."""

    def __init__(self) -> None:
        assert msgspec is not None
        # RecursionError: a line nested deeper than msgspec goes (lines are decoded before
        # their depth is measured where a schema bounds it: batch.py)
        self.errors: tuple[type[BaseException], ...] = (msgspec.DecodeError, RecursionError)
        fields: list[tuple[Any, ...]] = [(name, Any) for name in _COMMON + Step.REQUIRED]
        fields += [(name, Any, None) for name in (*STEP_FIELDS, *SEGMENT_STEP_FIELDS,
                                                     *TIMING_STEP_FIELDS)
                   if name not in Step.REQUIRED]
        self.StepLine = msgspec.defstruct(
            "StepLine", fields,
            tag_field=Common.KIND, tag=records.STEP, gc=False)
        device = msgspec.defstruct("DeviceLine", [(name, Any) for name in Device.REQUIRED],
                                    gc=False)
        host = [name for name in _COMMON + Hardware.REQUIRED if name != Hardware.DEVICES]
        self.HardwareLine = msgspec.defstruct(
            "HardwareLine", [(name, Any) for name in host]
            + [(Hardware.DEVICES, list[device] | None)],   # type: ignore[valid-type]
            tag_field=Common.KIND, tag=records.HARDWARE, gc=False)
        self.StateLine = state_line()
        frequent = self.StepLine | self.HardwareLine | self.StateLine
        self.typed = msgspec.json.Decoder(frequent)
        # For a block of lines at once: the other known kinds decode to empty Structs (their
        # lines are then read whole by the standard path); an unknown kind fails the block.
        rare = [msgspec.defstruct(f"{kind.title()}Line", [], tag_field=Common.KIND, tag=kind)
                for kind in records.KINDS
                if kind not in (records.STEP, records.HARDWARE, records.STATE)]
        self.block = msgspec.json.Decoder(reduce(or_, rare, frequent))
        self._plain = msgspec.json.Decoder()

    def shallow(self, item: Any) -> bool:
        """Whether a ``StateLine`` nests under SAFE_DEPTH (the module docstring)."""
        longest = max(map(len, item.layers.values()), default=0)
        if item.activations:
            longest = max(longest, *map(len, item.activations.values()))
        return longest < SHALLOW_ENTRY

    def state_record(self, raw: bytes) -> dict[str, Any]:
        """The whole record of a line msgspec has read as a ``shallow`` StateLine (no count
        of its brackets again), its "NaN" strings not revived: ``revive(state_record(raw),
        False)`` is ``decode_record(raw)``; StateColumns reads either alike."""
        try:
            value: dict[str, Any] = self._plain.decode(raw)
        except self.errors:           # a number beyond a double, which Raw let through
            return records.decode(raw.decode("utf-8"))
        return value

    def usable(self, raw: bytes) -> bool:
        """Whether msgspec may answer for this line (see the module docstring)."""
        return raw.isascii() and not might_nest_deeply(raw)

    def decode_record(self, raw: bytes) -> dict[str, Any]:
        """``records.decode(raw.decode("utf-8"))``: the same record, or the same exception."""
        if self.usable(raw):
            try:
                value = self._plain.decode(raw)
            except self.errors:
                pass                      # the standard path says why, in its words
            else:
                if type(value) is dict:
                    # a copy that revives the non-finite strings, as records.decode does
                    return revive(value, False) if _needs_revival(raw) else value
        return records.decode(raw.decode("utf-8"))


def state_line() -> Any:
    """The ``StateLine`` Struct: the common fields and every field records.State declares,
    JSON scalars (a Python scalar after decoding), except ``layers`` and ``activations``,
    objects whose values (each layer's object) stay validated bytes; nothing else
    (``forbid_unknown_fields``: an unknown field could nest to any depth)."""
    scalar = float | int | str | bool | None
    entries = dict[str, msgspec.Raw]
    nested = (State.LAYERS, State.ACTIVATIONS)
    fields: list[tuple[Any, ...]] = [(name, entries if name in nested else scalar)
                                     for name in _COMMON + State.REQUIRED]
    fields += [(name, entries | None if name in nested else scalar, None)
               for name in State.OPTIONAL]
    return msgspec.defstruct("StateLine", fields, tag_field=Common.KIND, tag=records.STATE,
                             forbid_unknown_fields=True, gc=False)


def as_record(item: Any) -> dict[str, Any]:
    """A Struct of ``FastParser.typed`` as the dict ``records.decode`` gives, for the fields
    the Struct holds (a dict is returned as it is)."""
    if type(item) is dict:
        return item
    tag = item.__struct_config__.tag
    record: dict[str, Any] = {} if tag is None else {Common.KIND: tag}
    for name in item.__struct_fields__:
        value = getattr(item, name)
        if name == Hardware.DEVICES and isinstance(value, list):
            record[name] = [as_record(device) for device in value]
        else:
            record[name] = revive(value, name in records.FLOAT_FIELDS)
    return record


_parser: FastParser | None = None


def parser() -> FastParser | None:
    """The process's fast parser; None without msgspec or with ``MINDWATCH_JSON=json``."""
    global _parser
    if msgspec is None or os.environ.get(ENV, "").lower() == "json":
        return None
    if _parser is None:
        _parser = FastParser()
    return _parser
