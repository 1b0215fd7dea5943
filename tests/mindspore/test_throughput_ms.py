"""tokens/s and MFU from a real MindSpore run of the demo Transformer, through TrainMonitor."""
import math

import mindspore as ms
import pytest

from mindwatch.mindspore import TrainMonitor
from mindwatch.mindspore.demo.model import build_demo
from mindwatch.runlog import read_rank_log

BATCH, SEQ, LAYERS, HEADS, D_MODEL = 4, 16, 2, 4, 64
PEAK_TFLOPS = 0.05


def flops_per_token(net_with_loss):
    """6 N + 12 L H Q T (docs/api.md): N the parameters a token's matmuls use (the
    embedding tables are lookups, left out), Q the head dimension, T the sequence length."""
    n = sum(p.size for p in net_with_loss.trainable_params() if "emb" not in p.name)
    return 6 * n + 12 * LAYERS * HEADS * (D_MODEL // HEADS) * SEQ


def test_demo_transformer_logs_tokens_per_s_and_mfu(tmp_path, quiet):
    net_with_loss, optimizer, dataset = build_demo(steps=6, batch_size=BATCH, seq_len=SEQ)
    flops = flops_per_token(net_with_loss)
    assert flops == 6 * 70_062 + 12 * 2 * 4 * 16 * SEQ        # as docs/api.md works it out
    monitor = TrainMonitor(str(tmp_path), stream=quiet, hardware_interval_s=None,
                           tokens_per_sample=SEQ, flops_per_token=flops,
                           peak_tflops=PEAK_TFLOPS)
    model = ms.train.Model(monitor.wrap(net_with_loss, optimizer))
    model.train(1, dataset, callbacks=[monitor], dataset_sink_mode=False)
    steps = read_rank_log(str(tmp_path / "rank_0.jsonl")).steps
    assert len(steps) == 6
    for record in steps:
        # this rank's figures, from the dataset's batch size and the measured step time
        assert record["samples_per_s"] == pytest.approx(BATCH / record["step_time_s"])
        assert record["tokens_per_s"] == pytest.approx(record["samples_per_s"] * SEQ)
        assert record["mfu"] == pytest.approx(record["tokens_per_s"] * flops
                                              / (PEAK_TFLOPS * 1e12))
        assert math.isfinite(record["mfu"]) and record["tokens_per_s"] > 0
