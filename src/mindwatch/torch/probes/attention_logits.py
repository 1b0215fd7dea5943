"""The largest attention logit of an ``nn.MultiheadAttention``, computed again from its inputs.

The module never shows its logits: its fast path fuses the projections, the softmax and the
weighting (``scaled_dot_product_attention``), and ``need_weights`` returns them after the
softmax. So on a state step the probe recomputes them from the forward's own inputs and the
module's own weights: the query and key projections, the scaled dot product per head, the
module's masks applied as it applies them (True, or an additive -inf, hides a key; so does
``is_causal`` without a mask). The key columns ``add_bias_kv`` and ``add_zero_attn`` append
are left out, as the MindSpore adapter leaves them out. Cost: the two projections and one
batched matmul, under ``no_grad``, on state steps only (every ``state_interval`` steps).
"""
from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F

# nn.MultiheadAttention.forward's parameters, in order
_ARGUMENTS = ("query", "key", "value", "key_padding_mask", "need_weights", "attn_mask",
              "average_attn_weights", "is_causal")


def largest_logit(module: torch.nn.MultiheadAttention, args: tuple,
                  kwargs: dict[str, Any]) -> torch.Tensor:
    """The forward's largest pre-softmax logit (q·k / sqrt(head_dim) plus any additive
    mask), a 0-d float32 tensor on the module's device; -inf when every position is masked."""
    bound = {**dict(zip(_ARGUMENTS, args, strict=False)), **kwargs}
    query, key = bound["query"].detach(), bound["key"].detach()
    if query.dim() == 2:                              # (L, E): a batch of one
        query, key = query.unsqueeze(1), key.unsqueeze(1)
    elif module.batch_first:                          # (N, L, E) -> (L, N, E)
        query, key = query.transpose(0, 1), key.transpose(0, 1)
    embed, heads, head_dim = module.embed_dim, module.num_heads, module.head_dim
    if module._qkv_same_embed_dim:
        w_q, w_k = module.in_proj_weight[:embed], module.in_proj_weight[embed:2 * embed]
    else:
        w_q, w_k = module.q_proj_weight, module.k_proj_weight
    bias = module.in_proj_bias
    b_q, b_k = (None, None) if bias is None else (bias[:embed], bias[embed:2 * embed])
    q = F.linear(query.to(w_q.dtype), w_q, b_q)               # (L, N, E)
    k = F.linear(key.to(w_k.dtype), w_k, b_k)                 # (S, N, E)
    (length, batch), keys = q.shape[:2], k.shape[0]
    q = q.reshape(length, batch * heads, head_dim).transpose(0, 1)
    k = k.reshape(keys, batch * heads, head_dim).transpose(0, 1)
    logits = torch.bmm(q.float(), k.float().transpose(1, 2)) / math.sqrt(head_dim)
    logits = logits.view(batch, heads, length, keys)
    attn_mask = bound.get("attn_mask")
    if attn_mask is None and bound.get("is_causal"):
        attn_mask = torch.ones(length, keys, dtype=torch.bool, device=logits.device).triu(1)
    if attn_mask is not None:                # (L, S), or (N * heads, L, S)
        logits = _hidden(attn_mask.view(batch, heads, length, keys)
                         if attn_mask.dim() == 3 else attn_mask, logits)
    padding = bound.get("key_padding_mask")
    if padding is not None:                  # (N, S), or (S) for one sequence
        logits = _hidden(padding.reshape(batch, 1, 1, keys), logits)
    return logits.max()


def _hidden(mask: torch.Tensor, logits: torch.Tensor) -> torch.Tensor:
    """``logits`` with the keys ``mask`` hides (bool: True hides; float: added) at -inf."""
    if mask.dtype == torch.bool:
        return logits.masked_fill(mask, -math.inf)
    return logits + mask.float()
