"""A tiny decoder-only Transformer used by ``mindwatch demo``.

It is deliberately small (~100k parameters) so a few hundred steps fit in well
under a minute on a CPU, yet it has the layer structure of a real GPT, so the
per-layer statistics mindwatch reports (``blocks.0.attn``, ``blocks.1.mlp``...)
look like those of a real run. Nothing here calls ``set_context``: the caller
picks PyNative or GRAPH mode.
"""

from __future__ import annotations

import math

import mindspore as ms
import numpy as np
from mindspore import Tensor, nn, ops
from mindspore.nn.learning_rate_schedule import LearningRateSchedule

from . import data

__all__ = ["LMWithLoss", "TinyGPT", "WarmupCosineLR", "build_demo"]


class AttentionScores(nn.Cell):
    """The attention logits ``q k^T / sqrt(head_dim)``, before the mask and the softmax: a
    sub-Cell of their own (no Parameters), so that ``wrap(attention_logits=["*.scores"])``
    can watch the largest of them."""

    def __init__(self, head_dim: int):
        super().__init__()
        self.scale = 1.0 / math.sqrt(head_dim)

    def construct(self, q, k):
        return ops.matmul(q, k.swapaxes(-1, -2)) * self.scale


class CausalSelfAttention(nn.Cell):
    def __init__(self, *, d_model: int, n_heads: int, seq_len: int, dropout: float):
        super().__init__()
        if d_model % n_heads:
            raise ValueError(f"d_model={d_model} is not divisible by n_heads={n_heads}")
        self.n_heads = n_heads
        self.head_dim = d_model // n_heads
        self.scores = AttentionScores(self.head_dim)
        # One fused projection: fewer kernels per step matters more than clarity on CPU.
        self.qkv = nn.Dense(d_model, 3 * d_model)
        self.proj = nn.Dense(d_model, d_model)
        self.drop = nn.Dropout(p=dropout)
        # Additive mask built once as a constant (not a Parameter, so it never gets
        # gradients or shows up in checkpoints); -1e9 rather than -inf avoids NaN
        # from (-inf) - (-inf) inside softmax's max subtraction.
        mask = np.triu(np.full((seq_len, seq_len), -1e9, dtype=np.float32), k=1)
        self.causal_mask = Tensor(mask)

    def construct(self, x):
        b, t, d = x.shape
        qkv = self.qkv(x).reshape(b, t, 3, self.n_heads, self.head_dim)
        qkv = qkv.transpose(2, 0, 3, 1, 4)  # [3, B, H, T, hd]
        q, k, v = qkv[0], qkv[1], qkv[2]
        scores = self.scores(q, k)
        # Static slice: T is known at compile time, so shorter inputs still compile.
        scores = scores + self.causal_mask[:t, :t]
        attn = self.drop(ops.softmax(scores, axis=-1))
        out = ops.matmul(attn, v).transpose(0, 2, 1, 3).reshape(b, t, d)
        return self.drop(self.proj(out))


class MLP(nn.Cell):
    def __init__(self, *, d_model: int, d_ff: int, dropout: float):
        super().__init__()
        self.fc1 = nn.Dense(d_model, d_ff)
        self.act = nn.GELU(approximate=True)
        self.fc2 = nn.Dense(d_ff, d_model)
        self.drop = nn.Dropout(p=dropout)

    def construct(self, x):
        return self.drop(self.fc2(self.act(self.fc1(x))))


class Block(nn.Cell):
    """Pre-LayerNorm block: keeps the residual path clean, so training is stable without
    warm-up tricks."""

    def __init__(self, *, d_model: int, n_heads: int, d_ff: int, seq_len: int, dropout: float):
        super().__init__()
        self.ln1 = nn.LayerNorm((d_model,))
        self.attn = CausalSelfAttention(d_model=d_model, n_heads=n_heads, seq_len=seq_len,
                                        dropout=dropout)
        self.ln2 = nn.LayerNorm((d_model,))
        self.mlp = MLP(d_model=d_model, d_ff=d_ff, dropout=dropout)

    def construct(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class TinyGPT(nn.Cell):
    """Decoder-only Transformer: ``tokens int32 [B, T] -> logits float32 [B, T, vocab]``."""

    def __init__(self, *, vocab_size: int, seq_len: int, d_model: int = 64, n_heads: int = 4,
                 n_layers: int = 2, d_ff: int = 128, dropout: float = 0.0):
        super().__init__()
        self.seq_len = seq_len
        self.tok_emb = nn.Embedding(vocab_size, d_model)
        self.pos_emb = nn.Embedding(seq_len, d_model)
        self.positions = Tensor(np.arange(seq_len, dtype=np.int32))
        self.blocks = nn.CellList([
            Block(d_model=d_model, n_heads=n_heads, d_ff=d_ff, seq_len=seq_len, dropout=dropout)
            for _ in range(n_layers)
        ])
        self.ln_f = nn.LayerNorm((d_model,))
        self.head = nn.Dense(d_model, vocab_size)

    def construct(self, tokens):
        t = tokens.shape[1]
        x = self.tok_emb(tokens) + self.pos_emb(self.positions[:t])
        # A loop over a CellList is unrolled at compile time in GRAPH_MODE, which is fine here.
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln_f(x))


class LMWithLoss(nn.Cell):
    """Wraps a language model so ``construct(tokens, targets)`` returns the mean token
    cross-entropy."""

    def __init__(self, model: nn.Cell):
        # auto_prefix=False keeps Parameter.name as the model's own (``blocks.0.attn.qkv.weight``),
        # which is what per-layer reports group by; parameters_and_names() still adds ``model.``.
        super().__init__(auto_prefix=False)
        self.model = model

    def construct(self, tokens, targets):
        logits = self.model(tokens)
        vocab = logits.shape[-1]
        loss = ops.cross_entropy(logits.reshape(-1, vocab), targets.reshape(-1).astype(ms.int32))
        return loss.astype(ms.float32)


class WarmupCosineLR(LearningRateSchedule):
    """Linear warm-up to ``max_lr`` then cosine decay to ``min_lr`` at ``total_steps``.

    Closed form for step ``s`` (0-based)::

        warm = min((s + 1) / warmup_steps, 1)
        prog = clip((s - warmup_steps) / (total_steps - warmup_steps), 0, 1)
        lr   = warm * (min_lr + (max_lr - min_lr) * 0.5 * (1 + cos(pi * prog)))

    ``s + 1`` so the very first step already learns something. Branch-free (min/max
    instead of ``if``) because ``global_step`` is a tensor in GRAPH_MODE.
    """

    def __init__(self, *, max_lr: float, total_steps: int, warmup_steps: int, min_lr: float = 0.0):
        super().__init__()
        if not 0 < warmup_steps < total_steps:
            raise ValueError(
                f"need 0 < warmup_steps < total_steps, got {warmup_steps}, {total_steps}")
        self.max_lr = float(max_lr)
        self.min_lr = float(min_lr)
        self.warmup_steps = float(warmup_steps)
        self.decay_steps = float(total_steps - warmup_steps)

    def construct(self, global_step):
        s = global_step.astype(ms.float32)
        warm = ops.minimum((s + 1.0) / self.warmup_steps, 1.0)
        prog = ops.clamp((s - self.warmup_steps) / self.decay_steps, 0.0, 1.0)
        cos = 0.5 * (1.0 + ops.cos(math.pi * prog))
        return warm * (self.min_lr + (self.max_lr - self.min_lr) * cos)


def build_demo(*, seed: int = 0, steps: int = 300, batch_size: int = 16, seq_len: int = 48,
               lr: float = 3e-3, wrap_loss=None, wrap_schedule=None, **model_options):
    """Return ``(net_with_loss, optimizer, dataset)`` for the demo training loop.

    The dataset has exactly ``steps`` batches and the LR schedule ends at ``steps``,
    so one pass over the dataset is one full schedule. ``wrap_loss``/``wrap_schedule``
    (Cell -> Cell) let fault injection sit around the loss and the schedule; other keyword
    arguments go to ``TinyGPT`` (benchmarks scale the model with them).
    """
    ms.set_seed(seed)
    model = TinyGPT(vocab_size=data.vocab_size(), seq_len=seq_len, **model_options)
    net_with_loss = LMWithLoss(model)
    schedule = WarmupCosineLR(max_lr=lr, total_steps=max(steps, 2),
                              warmup_steps=max(1, min(steps // 10, 30)), min_lr=lr * 0.1)
    params = net_with_loss.trainable_params()
    if wrap_loss is not None:
        net_with_loss = wrap_loss(net_with_loss)
    if wrap_schedule is not None:
        schedule = wrap_schedule(schedule)
    # Standard GPT practice: decay only matrices; decaying LayerNorm gains and biases hurts.
    decay = [p for p in params if p.ndim >= 2]
    no_decay = [p for p in params if p.ndim < 2]
    optimizer = nn.AdamWeightDecay(
        [{"params": decay, "weight_decay": 0.01}, {"params": no_decay, "weight_decay": 0.0}],
        learning_rate=schedule, beta1=0.9, beta2=0.99,
    )
    dataset = data.make_dataset(batch_size=batch_size, seq_len=seq_len, num_batches=steps,
                                seed=seed)
    return net_with_loss, optimizer, dataset
