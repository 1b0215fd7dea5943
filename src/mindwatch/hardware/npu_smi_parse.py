"""Pure parsers for the text Huawei's ``npu-smi`` prints; every function accepts any ``str``
and never raises.

The tool's layout changes between CANN versions and board families (310/310P have no HBM
column, some versions add ``Phy-ID``), so ``npu-smi info`` columns are located through the
header rows and cells that say ``-``, ``NA`` or ``N/A`` become ``None``. A value is only read
from a row that reached its closing ``|``, so output cut mid-line yields ``None``, never a
shortened number.
"""
from __future__ import annotations

import re
from collections.abc import Collection, Iterable
from dataclasses import dataclass
from typing import Any, NamedTuple

from ..observation import DeviceSample
from ..records import DeviceProcess

_MISSING = {"", "-", "--", "na", "n/a"}
_NUMBER = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)")
_INT = re.compile(r"[0-9]{1,9}")           # bounded: int() refuses very long digit strings
# one value inside a cell: a word, or "used / total" with any spacing around the slash
_VALUE = re.compile(r"[^\s/]*\s*/\s*[^\s/]*|[^\s/]+")
# "N/A" would read as a used/total pair; "NA " keeps every later character in place
_NOT_AVAILABLE = re.compile(r"(?i)(?<![^\s/])n/a(?![^\s/])")
_BUS_ID = re.compile(r"[0-9A-Fa-f]{4}:[0-9A-Fa-f]{2}:")
# header word (lower case, prefix) -> NpuChip field; the first match wins
_HEADER_FIELDS = (
    ("npu", "npu_id"), ("name", "name"), ("health", "health"), ("power", "power_w"),
    ("temp", "temp_c"), ("hugepages", "hugepages"), ("chip", "chip_id"),
    ("phy-id", "phy_id"), ("device", "device_id"), ("bus-id", "bus_id"),
    ("aicore", "aicore_percent"), ("memory", "memory"), ("hbm", "hbm"),
)
_INT_FIELDS = {"npu_id", "chip_id", "phy_id", "device_id"}
_FLOAT_FIELDS = {"power_w", "temp_c", "aicore_percent"}
_PAIR_FIELDS = {"hugepages": ("hugepages_used", "hugepages_total"),
                "memory": ("memory_used_mb", "memory_total_mb"),
                "hbm": ("hbm_used_mb", "hbm_total_mb")}


@dataclass
class NpuChip:
    """One chip of ``npu-smi info``; ``None`` where the tool printed ``-``/NA or no column."""
    npu_id: int | None = None
    chip_id: int | None = None
    name: str | None = None
    health: str | None = None
    power_w: float | None = None
    temp_c: float | None = None
    aicore_percent: float | None = None
    memory_used_mb: float | None = None
    memory_total_mb: float | None = None
    hbm_used_mb: float | None = None
    hbm_total_mb: float | None = None
    hugepages_used: float | None = None
    hugepages_total: float | None = None
    phy_id: int | None = None            # "Chip Phy-ID" header (e.g. 25.x)
    device_id: int | None = None         # "Chip Device" header (310/310P style)
    bus_id: str | None = None


class NpuProcess(NamedTuple):
    """One row of the process table under ``npu-smi info``'s chips."""
    npu_id: int
    chip_id: int
    pid: int
    name: str | None
    memory_mb: float | None


class NpuMapping(NamedTuple):
    npu_id: int
    chip_id: int
    logic_id: int
    name: str | None


def _num(text: str) -> float | None:
    text = text.strip()
    return float(text) if _NUMBER.fullmatch(text) else None


def _int(text: str) -> int | None:
    text = text.strip()
    return int(text) if _INT.fullmatch(text) else None


def _text(text: str) -> str | None:
    text = " ".join(text.split())
    return None if text.lower() in _MISSING else text


def _pair(text: str) -> tuple[float | None, float | None]:
    parts = text.split("/")
    return (_num(parts[0]), _num(parts[1])) if len(parts) == 2 else (None, None)


def _cells(line: str) -> list[str] | None:
    line = line.strip()
    if len(line) < 2 or line[0] != "|" or line[-1] != "|":
        return None
    return line[1:-1].split("|")


def _field(word: str) -> str | None:
    word = word.lower()
    return next((f for prefix, f in _HEADER_FIELDS if word.startswith(prefix)), None)


def _header(cells: list[str]) -> list[list[tuple[int, str | None]]]:
    return [[(m.start(), _field(m.group())) for m in re.finditer(r"\S+", c)] for c in cells]


def _assign(header, cells: list[str]) -> dict[str, str]:
    """Map one data row's values to fields through the header above it."""
    out: dict[str, str] = {}
    # strict=False: a data row may have fewer or more cells than its header (uneven tables).
    for columns, cell in zip(header, cells, strict=False):
        cell = _NOT_AVAILABLE.sub("NA ", cell)
        values = [(m.start() + len(m.group()) - len(m.group().lstrip()), m.group().strip())
                  for m in _VALUE.finditer(cell)]
        if not columns:
            continue
        if len(values) == len(columns):
            # one value per header word: trust the order, so widths may differ
            for (_, name), (_, value) in zip(columns, values, strict=True):
                if name:
                    out[name] = value
            continue
        # a blank cell or a value with a space: fall back to the header's alignment
        for start, value in values:
            name = [n for s, n in columns if s <= start][-1:] or [columns[0][1]]
            if name[0]:
                out[name[0]] = (out[name[0]] + " " + value) if name[0] in out else value
    return out


def _chip(raw: dict[str, str]) -> NpuChip:
    chip = NpuChip()
    for name, value in raw.items():
        if name in _INT_FIELDS:
            setattr(chip, name, _int(value))
        elif name in _FLOAT_FIELDS:
            setattr(chip, name, _num(value))
        elif name in _PAIR_FIELDS:
            for attr, number in zip(_PAIR_FIELDS[name], _pair(value), strict=True):
                setattr(chip, attr, number)
        else:
            setattr(chip, name, _text(value))
    return chip


def parse_info(text: str) -> list[NpuChip]:
    """Chips of an ``npu-smi info`` table, in printed order.

    Each chip is two rows under two header rows (``NPU Name | Health | Power Temp
    Hugepages`` then ``Chip [Phy-ID|Device] | Bus-Id | AICore Memory [HBM]``). A first row whose
    second row never came (cut output) still yields a chip with what it carried.
    """
    try:
        return _parse_info(text if isinstance(text, str) else "")
    except Exception:  # a parser bug must cost one sample, never the training run
        return []


def _parse_info(text: str) -> list[NpuChip]:
    chips: list[NpuChip] = []
    head1 = head2 = None
    pending: dict[str, str] | None = None
    for line in text.splitlines():
        if line.strip().startswith("+"):  # a border closes the block
            if pending is not None:
                chips.append(_chip(pending))
            pending = None
            continue
        cells = _cells(line)
        if cells is None:
            continue
        words = cells[0].split()
        first = words[0].lower() if words else ""
        if any(c.strip().lower().startswith("process") for c in cells):
            head1 = head2 = None  # the process table follows; its rows are not chips
        elif first == "npu" and any(w.lower() == "name" for w in words):
            head1, head2 = _header(cells), None
        elif first == "chip" and head1 is not None:
            head2 = _header(cells)
        elif head1 is None or (_int(first) is None and first not in _MISSING):
            continue
        elif pending is None and not (head2 and any(_BUS_ID.match(c.strip()) for c in cells)):
            if len(cells) <= len(head1):
                pending = _assign(head1, cells)
        elif head2 is not None and len(cells) <= len(head2):
            chips.append(_chip({**(pending or {}), **_assign(head2, cells)}))
            pending = None
    if pending is not None:
        chips.append(_chip(pending))
    return chips


def parse_processes(text: str) -> list[NpuProcess]:
    """The process table after ``npu-smi info``'s chips (``NPU Chip | Process id | Process
    name | Process memory(MB)``): one entry per row that reached its closing ``|`` with an
    npu id, a chip id and a pid; "No running processes found" rows give none."""
    found: list[NpuProcess] = []
    try:
        table = False
        for line in (text if isinstance(text, str) else "").splitlines():
            cells = _cells(line)
            if cells is None:
                continue
            if any(c.strip().lower().startswith("process") for c in cells):
                table = True
                continue
            if not table or len(cells) < 3:
                continue
            place = cells[0].split()
            npu, chip = (_int(place[0]), _int(place[1])) if len(place) == 2 else (None, None)
            pid = _int(cells[1])
            if npu is not None and chip is not None and pid is not None:
                found.append(NpuProcess(npu, chip, pid, _text(cells[2]),
                                        _num(cells[3]) if len(cells) > 3 else None))
    except Exception:  # see parse_info
        return []
    return found


def parse_mapping(text: str) -> list[NpuMapping]:
    """``npu-smi info -m`` rows as (npu id, chip id, logic id, name); rows whose logic id is
    ``-`` (the MCU of 910B boards) are left out, and so is a row cut before its name."""
    out: list[NpuMapping] = []
    for line in (text if isinstance(text, str) else "").splitlines():
        m = re.fullmatch(r"\s*([0-9]+)\s+([0-9]+)\s+(\S+)\s+(\S.*?)\s*", line)
        if not m:
            continue
        npu, chip, logic = _int(m.group(1)), _int(m.group(2)), _int(m.group(3))
        if npu is not None and chip is not None and logic is not None:
            out.append(NpuMapping(npu, chip, logic, _text(m.group(4))))
    return out


def _blocks(text: str) -> list[list[tuple[str, str]]]:
    blocks: list[list[tuple[str, str]]] = [[]]
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if not sep or not key.strip():
            blocks.append([])  # blank (or foreign) lines separate the tool's blocks
            continue
        blocks[-1].append((" ".join(key.split()), value.strip()))
    return [b for b in blocks if b]


def parse_usages(text: str) -> dict[str, Any]:
    """``npu-smi info -t usages -i N`` as ``{"npu_id", "chip_count", "chips": {chip id:
    {field as printed: float or None}}}``.

    ``Chip ID`` ends each chip block in the recorded output but opens it in ``-t common``;
    either order is accepted. Fields outside any chip block (an MCU block, a block cut
    before its ``Chip ID``) are dropped rather than credited to a guessed chip.
    """
    result: dict[str, Any] = {"npu_id": None, "chip_count": None, "chips": {}}
    try:
        for block in _blocks(text if isinstance(text, str) else ""):
            keys = [k.lower() for k, _ in block if k.lower() not in ("npu id", "chip count")]
            chip_at_start = bool(keys) and keys[0] == "chip id"
            fields: dict[str, float | None] = {}
            chip: int | None = None
            for key, value in [*block, ("Chip ID", "")]:  # the sentinel flushes the rest
                low = key.lower()
                if low == "npu id":
                    result["npu_id"] = _int(value)
                elif low == "chip count":
                    result["chip_count"] = _int(value)
                elif low == "chip id":
                    if chip_at_start and chip is not None:
                        result["chips"][chip] = fields
                    elif not chip_at_start and fields and _int(value) is not None:
                        result["chips"][_int(value)] = fields
                    chip, fields = _int(value), {}
                else:
                    number = _num(value)
                    if number is not None or value.lower() in _MISSING:
                        fields[key] = number
    except Exception:  # see parse_info
        pass
    return result


def parse_common(text: str) -> dict[str, Any]:
    """``npu-smi info -t common -i N`` (``Temperature(C)``, ``Aicore Usage Rate(%)``,
    ``NPU Real-time Power(W)``...): the same key : value shape and result as parse_usages."""
    return parse_usages(text)


def to_device_samples(chips: Iterable[NpuChip], logic_ids=None,
                      processes: Iterable[NpuProcess] | None = None,
                      own_pids: Collection[int] = ()) -> list[DeviceSample]:
    """One ``DeviceSample`` per chip. ``logic_ids`` is parse_mapping's list or a dict
    ``{(npu id, chip id): logic id}``; the index is the chip's logic id (what DEVICE_ID and
    ASCEND_RT_VISIBLE_DEVICES count) when known, else its position in ``chips``. With
    ``processes`` (parse_processes'), a chip one of ``own_pids`` runs on gets ``others``: the
    other processes on it (npu-smi shows their device memory, not their share of the chip)."""
    try:
        if isinstance(logic_ids, dict):
            mapping = dict(logic_ids)
        else:
            mapping = {(m[0], m[1]): m[2] for m in (logic_ids or ())}
        samples = []
        for position, chip in enumerate(chips or ()):
            used, total = chip.memory_used_mb, chip.memory_total_mb
            # 910 boards print "0 / 0" under Memory-Usage: their device memory is the HBM;
            # an HBM "0 / 0" beside a real Memory-Usage says the opposite
            has_hbm = chip.hbm_used_mb is not None or chip.hbm_total_mb is not None
            if has_hbm and not (chip.hbm_total_mb == 0 and (total or 0) > 0):
                used, total = chip.hbm_used_mb, chip.hbm_total_mb
            if total == 0:      # no device has 0 MB: the tool had no reading (HBM NA on a 910)
                used = total = None
            index = mapping.get((chip.npu_id, chip.chip_id))
            on_chip = [p for p in processes or ()
                       if (p.npu_id, p.chip_id) == (chip.npu_id, chip.chip_id)]
            others = None
            if any(p.pid in own_pids for p in on_chip):
                others = [{DeviceProcess.PID: p.pid, DeviceProcess.NAME: p.name,
                           DeviceProcess.MEM_USED_MB: p.memory_mb}
                          for p in on_chip if p.pid not in own_pids]
            samples.append(DeviceSample(
                type="npu", index=position if index is None else index,
                util_percent=chip.aicore_percent, mem_used_mb=used, mem_total_mb=total,
                temp_c=chip.temp_c, power_w=chip.power_w, others=others))
        return samples
    except Exception:  # see parse_info
        return []
