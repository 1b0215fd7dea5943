"""Host-memory snapshots of the whole training state, for ``on_anomaly="rewind"``.

The training state is every Parameter of the train cell: the network's weights, the
optimizer's moments and ``global_step`` (so the LR schedule goes back too), and a loss
scale when the cell has one; mindwatch's own skip limits are left out (the host recomputes
them). A snapshot is a numpy copy of each, and a restore writes the same bytes back with
``set_data``: bit for bit, in GRAPH_MODE as in PyNative (the compiled graph reads the
Parameters' memory, as it does after ``load_param_into_net``).

Cost (``benchmarks/snapshots.py``): one device-to-host copy of the state per snapshot, and
``snapshots_kept`` copies held in host memory (with Adam about 3x the weights' bytes each).
"""
from __future__ import annotations

from collections.abc import Callable

import mindspore as ms
import numpy as np
from mindspore import nn

from ..step.verdict import OWN_PREFIX


class TrainStateSnapshots:
    """A ``rewinding.SnapshotStore`` over the Parameters of the cell ``cell()`` returns
    (looked up at each call: the train cell is known only once training begins)."""

    def __init__(self, cell: Callable[[], nn.Cell | None]):
        self._cell = cell
        self._copies: dict[int, list[tuple[ms.Parameter, np.ndarray]]] = {}

    def _parameters(self) -> list[ms.Parameter]:
        cell = self._cell()
        if cell is None:
            raise RuntimeError("no train cell to snapshot yet: rewind needs Model.train or "
                               "monitor.wrap(...)")
        seen: set[int] = set()
        parameters = []
        for parameter in cell.get_parameters():
            if id(parameter) not in seen and not parameter.name.startswith(OWN_PREFIX):
                seen.add(id(parameter))
                parameters.append(parameter)
        return parameters

    def take(self, step: int) -> int:
        # asnumpy() may share the tensor's host memory (CPU): copy, or the next step's
        # update would write through into the snapshot.
        copies = [(p, np.array(p.asnumpy(), copy=True)) for p in self._parameters()]
        self._copies[step] = copies
        return sum(array.nbytes for _, array in copies)

    def restore(self, step: int) -> None:
        for parameter, array in self._copies[step]:
            # A fresh Tensor per restore: the snapshot must survive this rewind for the next.
            parameter.set_data(ms.Tensor(array.copy()))

    def drop(self, step: int) -> None:
        self._copies.pop(step, None)
