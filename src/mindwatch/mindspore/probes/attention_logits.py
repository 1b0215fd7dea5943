"""The largest attention logit of an ``nn.MultiheadAttention``, computed in the graph.

MindSpore's ``nn.MultiheadAttention`` (and so ``nn.TransformerEncoderLayer``,
``nn.TransformerDecoderLayer`` and ``nn.Transformer``, built from it) computes its logits
inside ``ops.function.nn_func.multi_head_attention_forward``: no sub-Cell outputs them, and
the attention weights it can return are after the softmax, which forgets their scale. So the
probe recomputes them from the cell's own inputs and projection Parameters:
``max over heads, queries, keys of (x_q W_q + b_q)(x_k W_k + b_k)^T / sqrt(head_dim)``, with
``attn_mask`` and ``key_padding_mask`` applied as MindSpore applies them (True, or an
additive -inf, hides a key). One extra product of the queries and keys per attention cell,
on state steps only. The columns ``add_bias_kv`` and ``add_zero_attn`` append are left out.
"""
from __future__ import annotations

import math

import mindspore as ms
from mindspore import nn, ops


def is_multihead_attention(cell: nn.Cell) -> bool:
    return isinstance(cell, nn.MultiheadAttention)


def _projection(cell, x, index):
    """Queries (index 0) or keys (1), (N, L, E): the cell's own projection of ``x``."""
    embed = cell.embed_dim
    if cell.in_proj_weight is not None:
        weight = cell.in_proj_weight[index * embed:(index + 1) * embed]
    else:
        weight = cell.q_proj_weight if index == 0 else cell.k_proj_weight
    y = ops.matmul(x.astype(ms.float32), weight.astype(ms.float32).swapaxes(0, 1))
    if cell.in_proj_bias is not None:
        y = y + cell.in_proj_bias[index * embed:(index + 1) * embed].astype(ms.float32)
    return y


def _heads(cell, y):
    n, length, _ = y.shape
    return y.reshape(n, length, cell.num_heads, cell.head_dim).transpose(0, 2, 1, 3)


def _hidden(mask, logits):
    """``logits`` with the positions ``mask`` hides at -inf (bool: True hides; float: added,
    as MindSpore adds it)."""
    if mask.dtype == ms.bool_:
        return ops.masked_fill(logits, mask, ms.Tensor(-math.inf, ms.float32))
    return logits + mask.astype(ms.float32)


def multihead_max_logit(cell, query, key, key_padding_mask, attn_mask):
    """The largest logit (float32 scalar) ``cell`` computes from these inputs, as its
    ``construct`` receives them (batch first or not, batched or one sequence)."""
    if query.ndim == 2:                 # one sequence: (L, E)
        query, key = query.expand_dims(1), key.expand_dims(1)
        if key_padding_mask is not None:
            key_padding_mask = key_padding_mask.expand_dims(0)
    elif cell.batch_first:
        query, key = query.swapaxes(0, 1), key.swapaxes(0, 1)
    # (L, N, E) -> (N, L, E)
    q = _heads(cell, _projection(cell, query.swapaxes(0, 1), 0))
    k = _heads(cell, _projection(cell, key.swapaxes(0, 1), 1))
    logits = ops.matmul(q, k.swapaxes(-1, -2)) / math.sqrt(cell.head_dim)   # (N, H, L, S)
    if attn_mask is not None:
        if attn_mask.ndim == 3:         # (N * H, L, S)
            attn_mask = attn_mask.reshape(logits.shape)
        logits = _hidden(attn_mask, logits)
    if key_padding_mask is not None:    # (N, S)
        logits = _hidden(key_padding_mask.expand_dims(1).expand_dims(1), logits)
    return ops.stop_gradient(logits.max())
