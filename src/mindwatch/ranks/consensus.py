"""Every rank learns, after every step, whether any rank wants to stop or to rewind, whether an
anomaly touched the step anywhere, how long each rank took to get its batch ready, the
middle of each rank's straggler window and the medians of its own work and CPU wait (the slow
rank's cause, detectors/slow_cause.py) and the cause it is slow by now, and rank 0 every rank's
row of job fields for the job log (job/fields.py): one SUM all-reduce of a small float32
vector (80 bytes a rank), which
the adapter carries out with its framework's collective (``reduce_sum``).

A stop decided on one rank must stop all ranks after the same step, or the others block in
their next collective until a timeout kills the job. Each rank writes only its own slots of
the vector (zeros elsewhere), so a SUM (the one reduction that works on every backend,
MindSpore's CPU included) gathers them all. numpy is imported where used: the views import
this package and need none.
"""
from __future__ import annotations

import socket
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..basics.rank import RankInfo
from ..recovery.rewinding import RewindWish
from .peers import STOP_REASONS, Peers, stop_code

if TYPE_CHECKING:
    import numpy as np

# Slots per rank, in this order: stop code, data time, rewind (steps back from this step to
# the onset, plus one: small integers stay exact in float32 where a step number would not),
# the rewind's anomaly kind (as a stop code), touched (0/1), then the two middle values of
# the rank's straggler window (detectors/straggler.py ``share``; zeros when it shares none),
# the medians of its own work before the step's collective (s) and of its threads' CPU wait
# (s per s) (detectors/slow_cause.py ``share``; -1 when unknown), and the cause the rank's
# straggler rule names it slow by now (0: none, else 1 + its index in slow_cause.CAUSES).
# Each kind of slot is a block of one slot per rank: block i holds rank r at i * n + r.
_STOP, _DATA, _BACK, _KIND, _TOUCHED, _LOW, _HIGH, _WORK, _WAIT, _SLOW = range(10)
_SLOTS = 10
# Where each rank runs, exchanged once: its host name's first bytes and its device.
_HOST_BYTES = 64

# float32 vector -> its SUM over the ranks (the framework's all-reduce)
ReduceSum = Callable[["np.ndarray"], "np.ndarray"]


@dataclass
class Exchange:
    # numpy arrays, one entry per rank, so that what reads them costs array operations at any
    # number of ranks
    stop_codes: np.ndarray       # int64: 0, or 1 + the index of the kind that stops the rank
    # float32, as exchanged: seconds from the previous step's end to this start
    data_times: np.ndarray
    rewind_wishes: list[RewindWish]     # the ranks that want to rewind
    touched: bool                # an anomaly of the training state touched the step somewhere
    # (ranks, job/fields.py's WIDTH) float32: every rank's row for the job log; None when
    # the ranks exchanged none
    job_rows: np.ndarray | None = None
    # (2, ranks) float32, as exchanged: each rank's two middle data times of its straggler
    # window (low, high); None when this rank shared none
    middles: np.ndarray | None = None
    # (ranks,) float32 each: every rank's median own work (s) and CPU wait (s per s) over its
    # window, -1 where unknown; None when this rank shared none
    work: np.ndarray | None = None
    waits: np.ndarray | None = None
    # (ranks,) int64: the cause each rank is slow by now (``_SLOW``); None when this rank
    # shared none
    slow: np.ndarray | None = None


class RankConsensus:
    def __init__(self, rank: int, world_size: int, reduce_sum: ReduceSum):
        self.rank, self.world_size = rank, world_size
        self._reduce = reduce_sum

    def exchange(self, step: int, stop: int, data_time_s: float, wish: RewindWish | None,
                 touched: bool, job_row: np.ndarray | None = None,
                 middle: tuple[float, float] | None = None, *,
                 work: tuple[float, float] | None = None, slow: int | None = None
                 ) -> Exchange:
        """``job_row``: this rank's row for the job log (job/fields.py), exchanged in the
        same all-reduce, after the decisions' slots; the same width on every rank.
        ``middle``: the two middle values of this rank's straggler window (``share``);
        ``work``: its medians of own work and CPU wait (``SlowCause.share``); ``slow``: the
        cause its straggler rule names it slow by (``StragglerDetector.slow_code``)."""
        import numpy as np

        n = self.world_size
        width = 0 if job_row is None else len(job_row)
        vector = self._slots(step, stop, data_time_s, wish, touched, width)
        if middle is not None:
            vector[_LOW * n + self.rank], vector[_HIGH * n + self.rank] = middle
        if work is not None:
            vector[_WORK * n + self.rank], vector[_WAIT * n + self.rank] = work
        if slow is not None:
            vector[_SLOW * n + self.rank] = slow
        if job_row is not None:
            start = _SLOTS * n + self.rank * width
            vector[start:start + width] = job_row
        total = self._reduce(vector)
        # round() of each slot, as numpy does it (half to even, like round); only the ranks
        # that wish a rewind are visited in Python
        back = np.rint(total[_BACK * n:_KIND * n])
        kinds = np.rint(total[_KIND * n:_TOUCHED * n])
        wishing = (back > 0) & (kinds > 0) & (kinds <= len(STOP_REASONS))
        wishes = [RewindWish(onset=step - int(back[rank]) + 1,
                             kind=STOP_REASONS[int(kinds[rank]) - 1], rank=rank)
                  for rank in np.flatnonzero(wishing).tolist()]
        return Exchange(stop_codes=np.rint(total[:n]).astype(np.int64),
                        data_times=np.array(total[_DATA * n:_BACK * n]), rewind_wishes=wishes,
                        touched=bool(total[_TOUCHED * n:_LOW * n].sum() > 0),
                        job_rows=None if job_row is None
                        else total[_SLOTS * n:].reshape(n, width),
                        middles=None if middle is None
                        else total[_LOW * n:_WORK * n].reshape(2, n),
                        work=None if work is None else total[_WORK * n:_WAIT * n],
                        waits=None if work is None else total[_WAIT * n:_SLOW * n],
                        slow=None if slow is None
                        else np.rint(total[_SLOW * n:_SLOTS * n]).astype(np.int64))

    def _slots(self, step: int, stop: int, data_time_s: float, wish: RewindWish | None,
               touched: bool, width: int = 0) -> np.ndarray:
        """This rank's exchange vector: its own slots set, zeros elsewhere (_SLOTS), then
        ``width`` more zeros per rank (the job rows)."""
        import numpy as np

        n = self.world_size
        vector = np.zeros((_SLOTS + width) * n, np.float32)
        vector[_STOP * n + self.rank] = stop
        vector[_DATA * n + self.rank] = data_time_s
        if wish is not None:
            vector[_BACK * n + self.rank] = step - wish.onset + 1
            vector[_KIND * n + self.rank] = stop_code(wish.kind)
        vector[_TOUCHED * n + self.rank] = float(touched)
        return vector

    def gather(self, vector: np.ndarray) -> np.ndarray:
        """Every rank's ``vector`` (float32, the same length on every rank), one row each."""
        import numpy as np

        n, width = self.world_size, len(vector)
        slots = np.zeros(n * width, np.float32)
        slots[self.rank * width:(self.rank + 1) * width] = vector
        return self._reduce(slots).reshape(n, width)

    def places(self, host: str, device: int | None
               ) -> dict[int, tuple[str | None, int | None]]:
        """Every rank's host and device, from one SUM all-reduce (byte values and small
        integers are exact in float32); a device of -1 is unknown."""
        import numpy as np

        n, width = self.world_size, _HOST_BYTES + 1
        total = self._reduce(self._place_slots(host, device)).reshape(n, width)
        # The byte values and devices are exact in float32. Every rank's name in one bytes
        # object; each distinct name decoded once (the ranks of a host share it).
        names = np.where(total[:, :_HOST_BYTES] > 0, total[:, :_HOST_BYTES], 0)
        raw = names.astype(np.uint8).tobytes()
        decoded: dict[bytes, str] = {}
        texts = []
        for start in range(0, n * _HOST_BYTES, _HOST_BYTES):
            key = raw[start:start + _HOST_BYTES]
            text = decoded.get(key)
            if text is None:
                text = decoded[key] = key.replace(b"\0", b"").decode("utf-8", "replace")
            texts.append(text)
        devices = np.where(total[:, -1] < 0, -1, total[:, -1]).astype(np.int64).tolist()
        return {rank: (text, None if device < 0 else device)
                for rank, (text, device) in enumerate(zip(texts, devices, strict=True))}


    def _place_slots(self, host: str, device: int | None) -> np.ndarray:
        """This rank's ``places`` vector: its host name's first bytes and its device (-1:
        none) in its own row, zeros elsewhere."""
        import numpy as np

        width = _HOST_BYTES + 1
        vector = np.zeros(width * self.world_size, np.float32)
        name = host.encode("utf-8")[:_HOST_BYTES]
        start = self.rank * width
        vector[start:start + len(name)] = np.frombuffer(name, np.uint8)
        vector[start + _HOST_BYTES] = -1 if device is None else device
        return vector


def consensus_of(rank: RankInfo, world_size: int, reduce_sum: Callable[[], ReduceSum] | None,
                 peers: Peers, notice: Callable[[str], None], missing: str, *,
                 on_device: bool = True) -> RankConsensus | None:
    """The consensus of this job's ``world_size`` ranks, with ``peers.places`` filled in;
    ``reduce_sum``: the framework's all-reduce maker, None when its communication is not
    initialised (or knows another world size): then None, and ``missing`` (what to call)
    said once through ``notice``, since each rank stops on its own anomalies only.
    ``on_device``: the ranks train on devices (their local rank names one); False on the
    CPU, where a rank has no device to name."""
    if reduce_sum is not None and rank.world_size == world_size:
        consensus = RankConsensus(rank.rank, rank.world_size, reduce_sum())
        peers.places = consensus.places(socket.gethostname(),
                                        rank.local_rank if on_device else None)
        return consensus
    notice(f"{world_size} ranks but {missing}: each rank stops on its own anomalies only, "
           "and stragglers are not detected")
    return None
