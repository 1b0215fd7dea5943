"""MindInsight view of the run: our own summary file in ``<log_dir>/summary/mindwatch_rank<R>/``.

It lives in the MindSpore adapter because it writes MindSpore's own ``Event`` protobuf; the
core reaches it only through the factory the adapter hands it (``FrameworkHooks.sinks``).

Design (option a: write the file ourselves, never through ``SummaryRecord``):

* MindSpore allows ONE ``SummaryRecord`` per process (``SummaryRecord._check_count`` raises
  "only one instance is supported in a training process") and ``SummaryCollector`` opens
  one when training begins. Adding our values to the user's record would only work while a
  collector is active, and opening our own would break the user's collector. So we write the
  summary format directly: MindSpore's own ``summary_pb2.Event`` protobuf in MindSpore's
  record framing. No ``SummaryRecord``, no writer subprocess; works with or without a
  ``SummaryCollector`` in the same process.
* Framing (``mindspore/train/summary/writer.py`` counts "8: data length, 4: crc32 of data
  length, 4: crc32 of data"; the C++ ``EventWriter_`` writes, verified byte for byte on a
  file written by ``SummaryRecord``): little-endian uint64 length, masked CRC-32C of those 8
  bytes, the serialized ``Event``, masked CRC-32C of it. The mask is TensorFlow's
  ``((crc >> 15 | crc << 17) + 0xa282ead8) mod 2**32``. MindInsight's loader checks both CRCs
  and ignores the rest of a file after a bad one.
* A file starts, like MindSpore's ``SummaryWriter.init_writer``, with an Event whose
  ``version`` is "MindSpore.Event:1". Each record becomes one Event (``step``, ``wall_time``,
  ``summary.value`` with ``tag`` and float32 ``scalar_value``).
* Tags: MindSpore writes the bare tag (``add_value('scalar', 'loss', ...)`` is stored as
  "loss"; the "[:Scalar]" suffix of summary operators is stripped by
  ``SummaryRecord._parse_from`` before writing, and MindInsight shows "<tag>/scalar"). We
  use the TensorBoard sink's names: ``train/loss``, ``time/step_time_s``, ``hardware/npu0/
  temp_c``, ``anomalies/<kind>`` (running count), ... The summary format has no text type,
  so anomalies appear only as those counts.
* File name: MindSpore's pattern (``get_event_file_name``) is ``<prefix>.out.events.summary.
  <unix seconds>.<device id>.<hostname><suffix>``, default prefix "events", suffix "_MS".
  We use prefix "mindwatch" (distinct from the user's files). MindInsight's file filter is
  ``summary\\.\\d+`` minus names ending "_lineage"/"_explain".
* Directory: MindInsight's ``_SummaryParser`` follows ONE file per directory: it sorts by the
  timestamp in the name and, once it has moved on to a newer file, skips every older one
  (``_compare_summary_file``). Two files growing side by side in ``summary/`` would freeze
  one of them in a live MindInsight. So ours goes one level down, ``summary/mindwatch_rank<R>/``;
  MindInsight scans the base directory and its direct subdirectories, so with
  ``--summary-base-dir <log_dir>/summary`` it lists the user's collector as "./" and ours as
  "./mindwatch_rank<R>".

Each record is handed to the OS with a single unbuffered ``write`` (a live MindInsight sees it
at once; a torn tail record is ignored by its loader); the file is fsync'ed on close.
"""
from __future__ import annotations

import os
import platform
import re
import struct
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from ...sinks.base import Sink, SinkContext
from ...sinks.scalars import ScalarView
from ..compat import summary_event_class

FILE_PREFIX = "mindwatch"
FILE_SUFFIX = "_MS"
EVENT_FILE_NAME_MARK = ".out.events.summary."      # as mindspore's _summary_adapter
INIT_VERSION = "MindSpore.Event:1"                 # as mindspore's package_init_event


def _crc32c_table():
    table = []
    for byte in range(256):
        crc = byte
        for _ in range(8):
            crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1   # Castagnoli, reflected
        table.append(crc)
    return tuple(table)


_TABLE = _crc32c_table()


def crc32c_python(data: bytes) -> int:
    """CRC-32C in pure Python: about 30 us for the ~300-byte event written per step, and no
    compiled dependency."""
    crc = 0xFFFFFFFF
    for byte in data:
        crc = _TABLE[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def _fast_crc32c() -> Callable[[bytes], int] | None:
    """google-crc32c's C implementation (pip install google-crc32c), ~100x quicker, when it is
    installed and really compiled (its pure-Python fallback would be slower than ours)."""
    try:
        import google_crc32c
    except ImportError:
        return None
    if getattr(google_crc32c, "implementation", "c") != "c":
        return None
    return google_crc32c.value


crc32c: Callable[[bytes], int] = _fast_crc32c() or crc32c_python


def masked_crc32c(data: bytes) -> int:
    crc = crc32c(data)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def frame(payload: bytes) -> bytes:
    """One record: uint64 length, masked CRC of the length, payload, masked CRC of payload."""
    header = struct.pack("<Q", len(payload))
    return (header + struct.pack("<I", masked_crc32c(header)) + payload
            + struct.pack("<I", masked_crc32c(payload)))


def read_records(path: str) -> Iterator[bytes]:
    """The payloads of a summary file in order. Raises ValueError on a CRC mismatch; stops
    quietly at a torn last record (a file still being written)."""
    with open(path, "rb") as file:
        data = file.read()
    offset = 0
    while offset + 12 <= len(data):
        header = data[offset:offset + 8]
        (header_crc,) = struct.unpack("<I", data[offset + 8:offset + 12])
        if header_crc != masked_crc32c(header):
            raise ValueError(f"{path}: length CRC mismatch at byte {offset}")
        (length,) = struct.unpack("<Q", header)
        end = offset + 12 + length + 4
        if end > len(data):
            return
        payload = data[offset + 12:offset + 12 + length]
        (payload_crc,) = struct.unpack("<I", data[end - 4:end])
        if payload_crc != masked_crc32c(payload):
            raise ValueError(f"{path}: data CRC mismatch at byte {offset}")
        yield payload
        offset = end


def read_events(path: str, event_type: Any) -> Iterator[Any]:
    """The parsed ``Event`` messages of a summary file (ours or MindSpore's)."""
    for payload in read_records(path):
        yield event_type.FromString(payload)


def _host() -> str:
    # platform.node() as MindSpore uses, limited to characters safe in a file name.
    return re.sub(r"[^A-Za-z0-9._-]", "_", platform.node()) or "localhost"


def open_mindinsight_sink(context: SinkContext) -> MindInsightSink:
    """The factory ``TrainMonitor`` hands the core for ``mindinsight=True``."""
    return MindInsightSink(context.log_dir, context.rank)


class MindInsightSink(Sink):
    """Scalars for MindInsight, the same names and values as ``TensorBoardSink``.
    ``write`` may be called from several threads (one lock around encode + write).
    ``event_class``: the summary ``Event`` protobuf class, MindSpore's by default."""

    def __init__(self, log_dir: str, rank: int = 0, *, event_class: Any = None):
        self._event = event_class if event_class is not None else summary_event_class()
        self.rank = rank
        self.directory = os.path.join(log_dir, "summary", f"mindwatch_rank{rank}")
        os.makedirs(self.directory, exist_ok=True)
        self._fd: int | None = None
        self.path = self._create_file()
        self._view = ScalarView()
        self._lock = threading.Lock()
        init = self._event(wall_time=time.time(), version=INIT_VERSION)
        self._append(init)

    def _create_file(self) -> str:
        # The name's timestamp orders files for MindInsight; a second sink in the same second
        # (a new run segment) takes the next free second instead of overwriting.
        stamp = int(time.time())
        while True:
            name = (f"{FILE_PREFIX}{EVENT_FILE_NAME_MARK}{stamp}.{self.rank}."
                    f"{_host()}{FILE_SUFFIX}")
            path = os.path.join(self.directory, name)
            try:
                # 0o666: the umask decides, as for every other file of the run directory
                self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
                return path
            except FileExistsError:
                stamp += 1

    def _append(self, event: Any) -> None:
        fd = self._fd
        if fd is None:      # not reached: __init__ opens the file, write() checks first
            raise RuntimeError(f"MindInsight sink for {self.path} is already closed")
        data = frame(event.SerializeToString())
        written = 0
        while written < len(data):             # os.write may write less than asked
            written += os.write(fd, data[written:])

    def write(self, record: Mapping[str, Any]) -> None:
        with self._lock:
            if self._fd is None:
                raise RuntimeError(f"MindInsight sink for {self.path} is already closed")
            point = self._view.point(record)
            if point is None or not point.scalars:
                return
            event = self._event(wall_time=point.wall_time, step=point.step)
            for name, value in point.scalars:
                # scalar_value is a float32 field: values beyond its range become +-inf.
                event.summary.value.add(tag=name, scalar_value=value)
            self._append(event)

    def flush(self) -> None:
        """Every record is already with the OS; nothing is buffered in this process."""

    def close(self) -> None:
        with self._lock:
            if self._fd is not None:
                os.fsync(self._fd)
                os.close(self._fd)
                self._fd = None
