"""The train step's in-graph arithmetic (``ops.MultitypeFuncGraph`` over every gradient,
weight or moment through ``HyperMap``): squared norms, the update's squared norm, clipping's
scale, and reads ordered after the optimizer."""
from __future__ import annotations

import mindspore as ms
from mindspore import ops

square_sum = ops.MultitypeFuncGraph("mindwatch_square_sum")
scale = ops.MultitypeFuncGraph("mindwatch_scale")


@square_sum.register("Tensor")
def square_sum_tensor(grad):
    return ops.reduce_sum(row_square_sums(grad))


def row_square_sums(grad):
    """Per-row sums of squares (rows: the first axis), float32. Row by row, not over all
    axes at once: MindSpore's CPU reduction over every axis of a 2-D tensor is ~3x slower, and
    float32 partial sums of one row lose less precision than one long sum. ``g * g``, not
    ``square``: the same values, and the faster CPU kernel. float32 first: a float16 sum of
    squares overflows at a norm of only ~256."""
    grad = as_float32(grad)
    if grad.ndim < 2:
        grad = ops.reshape(grad, (-1,))
        return grad * grad
    if grad.ndim > 2:
        grad = ops.reshape(grad, (grad.shape[0], -1))
    return ops.reduce_sum(grad * grad, 1)


update_square_sum = ops.MultitypeFuncGraph("mindwatch_update_square_sum")


@update_square_sum.register("Tensor", "Tensor")
def _update_square_sum_tensors(new, old):
    """Squared norm of the update ``new - old``, taken in float32 (a bfloat16 difference of
    nearby weights would lose most of its digits)."""
    return ops.reduce_sum(row_square_sums(as_float32(new) - as_float32(old)))


after = ops.MultitypeFuncGraph("mindwatch_after")


# HyperMap descends into nested tuples: this is applied to each weight and moment
@after.register("Tensor", "Tensor")
def _after_tensor(marker, tensor):
    return ops.depend(tensor, marker)


@scale.register("Tensor", "Tensor")
def _scale_tensor(factor, grad):
    return grad * factor.astype(grad.dtype)


def as_float32(tensor):
    # Compile-time check: a Cast to the same type would still be a kernel launch.
    return tensor if tensor.dtype == ms.float32 else tensor.astype(ms.float32)
