"""Fingerprints of a replica: what each data-parallel rank holds, reduced to two numbers per
tensor (the float32 sum and sum of squares of every weight and optimizer-state Parameter),
computed in a compiled graph of their own on the device: one pass over the tensors, no host
copy but the fingerprint (8 bytes a tensor).

Replicas that train in lockstep hold bit-identical tensors, and the same kernels over the same
bits give the same sums, so the ranks compare them exactly (as bytes: NaN equals NaN). A flipped
bit or a silently wrong update changes the sum of its tensor (a change below a float32 sum's
resolution, ~1e-7 of the tensor's sum, can pass unseen; the sum of squares then usually
catches it).
"""
from __future__ import annotations

import mindspore as ms
import numpy as np
from mindspore import nn, ops

from ..step.verdict import OWN_PREFIX

_fingerprint = ops.MultitypeFuncGraph("mindwatch_fingerprint")


@_fingerprint.register("Tensor")
def _fingerprint_tensor(tensor):
    values = ops.reshape(tensor.astype(ms.float32), (-1,))
    return ops.stack((values.sum(), (values * values).sum()))


class Fingerprinter(nn.Cell):
    """``Fingerprinter(train_cell)()``: the fingerprint vector (float32, two per tensor, in
    ``names`` order) of the train cell's Parameters, mindwatch's own left out (the host sets
    them on every rank alike)."""

    def __init__(self, train_cell: nn.Cell):
        super().__init__(auto_prefix=False)
        object.__setattr__(self, "cell", train_cell)      # not a sub-Cell: not compiled in
        params = [p for p in train_cell.get_parameters() if not p.name.startswith(OWN_PREFIX)]
        self.names = tuple(p.name for p in params)
        self.params = ms.ParameterTuple(params)
        self.hyper_map = ops.HyperMap()

    @ms.jit
    def construct(self):
        return ops.concat(self.hyper_map(_fingerprint, self.params))

    def vector(self) -> np.ndarray:
        return self().asnumpy()
