"""Real-MindSpore (CPU) tests for the ``mindwatch demo`` model, data and LR schedule."""

from __future__ import annotations

import math

import numpy as np
import pytest
from mindspore import Tensor, nn

from mindwatch.mindspore.demo import data
from mindwatch.mindspore.demo.model import LMWithLoss, TinyGPT, WarmupCosineLR, build_demo


def _batches(dataset):
    return [(t.asnumpy(), y.asnumpy()) for t, y in dataset.create_tuple_iterator(num_epochs=1)]


def test_corpus_is_bundled_and_small():
    text = data.corpus_text()
    assert 2_000 < len(text.encode("utf-8")) <= 20_000
    assert 20 <= data.vocab_size() <= 100
    assert data.decode(data.encode(text[:200])) == text[:200]


def test_dataset_shapes_dtypes_and_shift():
    batches = _batches(data.make_dataset(batch_size=4, seq_len=16, num_batches=5, seed=3))
    assert len(batches) == 5
    corpus = data.encode(data.corpus_text())
    for tokens, targets in batches:
        assert tokens.shape == targets.shape == (4, 16)
        assert tokens.dtype == targets.dtype == np.int32
        assert tokens.min() >= 0 and tokens.max() < data.vocab_size()
        # Next-character targets: the window shifted left by one.
        np.testing.assert_array_equal(targets[:, :-1], tokens[:, 1:])
        for row_tokens, row_targets in zip(tokens, targets, strict=True):
            window = np.concatenate([row_tokens, row_targets[-1:]])
            hits = np.flatnonzero(corpus[: len(corpus) - 16] == window[0])
            assert any(np.array_equal(corpus[h:h + 17], window) for h in hits)


def test_dataset_is_deterministic_per_seed():
    a = _batches(data.make_dataset(batch_size=4, seq_len=16, num_batches=3, seed=7))
    b = _batches(data.make_dataset(batch_size=4, seq_len=16, num_batches=3, seed=7))
    c = _batches(data.make_dataset(batch_size=4, seq_len=16, num_batches=3, seed=8))
    for (ta, ya), (tb, yb) in zip(a, b, strict=True):
        np.testing.assert_array_equal(ta, tb)
        np.testing.assert_array_equal(ya, yb)
    assert not all(np.array_equal(ta, tc) for (ta, _), (tc, _) in zip(a, c, strict=True))


def test_parameter_names_are_layer_prefixed():
    net = LMWithLoss(TinyGPT(vocab_size=data.vocab_size(), seq_len=16, n_layers=2))
    names = {p.name for p in net.trainable_params()}
    # Per-layer gradient norms are grouped by these prefixes, so they are part of the contract.
    for prefix in ("tok_emb.", "pos_emb.", "blocks.0.attn.", "blocks.0.mlp.", "blocks.1.attn.",
                   "blocks.1.mlp.", "ln_f.", "head."):
        assert any(n.startswith(prefix) for n in names), prefix


def test_training_in_graph_mode_lowers_the_loss(graph_mode):
    steps = 60
    net, optimizer, dataset = build_demo(seed=0, steps=steps, batch_size=16, seq_len=48)
    train_step = nn.TrainOneStepCell(net, optimizer)
    train_step.set_train()
    losses = [float(train_step(t, y).asnumpy())
              for t, y in dataset.create_tuple_iterator(num_epochs=1)]
    assert len(losses) == steps
    assert all(math.isfinite(x) for x in losses)
    # An untrained model is close to uniform over the vocabulary.
    assert abs(losses[0] - math.log(data.vocab_size())) < 1.0
    first, tail = losses[0], float(np.mean(losses[-10:]))
    assert tail < 0.85 * first, (first, tail)
    assert int(optimizer.global_step.asnumpy().reshape(-1)[0]) == steps


def _closed_form_lr(step, *, max_lr, min_lr, warmup, total):
    warm = min((step + 1) / warmup, 1.0)
    prog = min(max((step - warmup) / (total - warmup), 0.0), 1.0)
    return warm * (min_lr + (max_lr - min_lr) * 0.5 * (1.0 + math.cos(math.pi * prog)))


def test_warmup_cosine_lr_matches_closed_form(graph_mode):
    max_lr, min_lr, warmup, total = 3e-3, 3e-4, 10, 100
    schedule = WarmupCosineLR(max_lr=max_lr, total_steps=total, warmup_steps=warmup, min_lr=min_lr)
    expected_named = {0: max_lr / warmup, warmup: max_lr, total: min_lr}
    for step in (0, 4, warmup - 1, warmup, 55, total - 1, total, total + 50):
        got = float(schedule(Tensor(np.array([step], dtype=np.int32))).asnumpy().reshape(-1)[0])
        want = _closed_form_lr(step, max_lr=max_lr, min_lr=min_lr, warmup=warmup, total=total)
        assert got == pytest.approx(want, rel=1e-5, abs=1e-9), step
        if step in expected_named:
            assert got == pytest.approx(expected_named[step], rel=1e-5), step
    # Halfway through the decay the cosine term is exactly one half.
    mid = warmup + (total - warmup) // 2
    got_mid = float(schedule(Tensor(np.array([mid], dtype=np.int32))).asnumpy().reshape(-1)[0])
    assert got_mid == pytest.approx((max_lr + min_lr) / 2, rel=1e-5)


def test_schedule_rejects_bad_warmup():
    with pytest.raises(ValueError):
        WarmupCosineLR(max_lr=1e-3, total_steps=10, warmup_steps=10)
