"""A few scalars of a MindSpore ``.ckpt`` file (``step_num``, ``epoch_num``: what
MindFormers' CheckpointMonitor appends), read without reading its tensors.

``mindspore.load_checkpoint`` reads the whole file into memory and parses it, even with a
``choice_func`` (MindSpore 2.10's ``_parse_ckpt_proto``): for one rank's file of a large model,
gigabytes, at a stop, beside the training process's own memory. The file is one protobuf
``Checkpoint`` message, a sequence of ``value`` fields (field 1, length-delimited), each a
``Value`` whose first field is its name (``tag``, field 1). So each value's name is read from
its first bytes and the rest is skipped with a seek; only the values asked for are read whole
(a few bytes each), and parsed with MindSpore's own message class. A file that is not that
(encrypted, a safetensors file, cut short) yields nothing.
"""
from __future__ import annotations

from collections.abc import Collection
from typing import BinaryIO

import numpy as np

# field 1, wire type 2 (length-delimited): a Checkpoint's ``value``, a Value's ``tag``
_FIELD_1 = 0x0A
# A scalar's whole Value is a few dozen bytes; one larger than this is a tensor, not asked for
_LARGEST_SCALAR = 4096
_HEAD = 64                            # bytes read to find a value's length and name
_DTYPES = {"Int8": np.int8, "Int16": np.int16, "Int32": np.int32, "Int64": np.int64,
           "UInt8": np.uint8, "Float16": np.float16, "Float32": np.float32,
           "Float64": np.float64}


def read_scalars(path: str, names: Collection[str]) -> dict[str, float]:
    """``name -> value`` for each of ``names`` that the checkpoint at ``path`` holds as a
    number (one element); {} for a file that cannot be read so."""
    wanted = {name.encode() for name in names}
    found: dict[str, float] = {}
    try:
        with open(path, "rb") as handle:
            for tag, body in _values(handle, wanted):
                value = _number(body)
                if value is not None:
                    found[tag] = value
                if len(found) == len(wanted):
                    break
    except (OSError, ValueError):
        return found
    return found


def _values(handle: BinaryIO, wanted: set[bytes]):
    """``(name, the value's bytes)`` of each wanted value, in file order."""
    offset = 0
    while True:
        handle.seek(offset)
        head = handle.read(_HEAD)
        if len(head) < 2 or head[0] != _FIELD_1:
            return                    # the end, or MindSpore's CRC trailer ("crc_num...")
        length, at = _varint(head, 1)
        start = offset + at
        if head[at:at + 1] == bytes([_FIELD_1]):
            size, name_at = _varint(head, at + 1)
            name = head[name_at:name_at + size]
            if name in wanted and length <= _LARGEST_SCALAR:
                handle.seek(start)
                body = handle.read(length)
                if len(body) < length:
                    return
                yield name.decode(), body
        offset = start + length


def _varint(data: bytes, at: int) -> tuple[int, int]:
    """The varint at ``data[at:]`` and where it ends; ValueError when cut short."""
    value = shift = 0
    while at < len(data):
        byte = data[at]
        value |= (byte & 0x7F) << shift
        at += 1
        if byte < 0x80:
            return value, at
        shift += 7
    raise ValueError("a varint cut short")


def _number(body: bytes) -> float | None:
    from mindspore.train.checkpoint_pb2 import Checkpoint

    try:
        tensor = Checkpoint.Value.FromString(body).tensor
    except Exception:                 # protobuf's DecodeError: not a Value after all
        return None
    dtype = _DTYPES.get(tensor.tensor_type)
    if dtype is None:
        return None
    array = np.frombuffer(tensor.tensor_content, dtype=dtype)
    return float(array[0]) if array.size == 1 else None
