"""The TensorBoard sink, read back with TensorBoard's own event reader."""
import logging
import os
import time

import pytest
from tensorboard.backend.event_processing import event_accumulator

from mindwatch.sinks.tensorboard import TensorBoardSink


def _load(directory):
    acc = event_accumulator.EventAccumulator(
        directory, size_guidance={event_accumulator.SCALARS: 0, event_accumulator.TENSORS: 0})
    acc.Reload()
    return acc


def test_values_read_back_by_tensorboard(tmp_path, run_records, expected_scalars, float32_equal):
    sink = TensorBoardSink(str(tmp_path), rank=0)
    for record in run_records:
        sink.write(record)
    sink.close()
    sink.close()                                        # idempotent

    directory = tmp_path / "tensorboard" / "rank_0"
    assert any(name.startswith("events.out.tfevents.") for name in os.listdir(directory))
    acc = _load(str(directory))
    assert set(acc.Tags()["scalars"]) == set(expected_scalars)
    for tag, expected in expected_scalars.items():
        events = acc.Scalars(tag)
        assert [e.step for e in events] == [step for step, _, _ in expected], tag
        for event, (_, wall, value) in zip(events, expected, strict=True):
            assert float32_equal(event.value, value), (tag, event.value, value)
            assert event.wall_time == pytest.approx(wall, abs=1e-3), tag

    texts = acc.Tensors("anomalies/text_summary")
    assert [t.step for t in texts] == [2, 3]
    first, second = (t.tensor_proto.string_val[0].decode() for t in texts)
    assert "loss_nonfinite" in first and "loss is NaN" in first
    assert "gradient_explode" in second and "value 150, threshold 100" in second
    assert "checkpoint, stop" in second and "anomaly_step3_rank0.ckpt" in second


def test_ranks_write_to_their_own_directories(tmp_path, run_records):
    sinks = [TensorBoardSink(str(tmp_path), rank=rank) for rank in (0, 1)]
    for rank, sink in enumerate(sinks):
        for record in run_records:
            sink.write({**record, "rank": rank})
        sink.close()
    assert sorted(os.listdir(tmp_path / "tensorboard")) == ["rank_0", "rank_1"]
    for rank in (0, 1):
        acc = _load(str(tmp_path / "tensorboard" / f"rank_{rank}"))
        assert [e.step for e in acc.Scalars("train/loss")] == [1, 2, 3]


def test_live_reader_sees_data_within_flush_secs(tmp_path, run_records):
    sink = TensorBoardSink(str(tmp_path), rank=0, flush_secs=1)
    for record in run_records[:5]:                      # up to the first anomaly, not closed
        sink.write(record)
    deadline = time.monotonic() + 10
    while True:
        acc = _load(str(tmp_path / "tensorboard" / "rank_0"))
        tags = acc.Tags()
        if "anomalies/text_summary" in tags["tensors"] and "train/loss" in tags["scalars"] \
                and len(acc.Scalars("train/loss")) == 2:
            break
        assert time.monotonic() < deadline, "data not on disk within 10 s of flush_secs=1"
        time.sleep(0.2)
    assert [t.step for t in acc.Tensors("anomalies/text_summary")] == [2]
    sink.close()
    with pytest.raises(RuntimeError, match="closed"):
        sink.write(run_records[1])


def test_nonfinite_values_do_not_spam_the_log(tmp_path, run_records, caplog):
    sink = TensorBoardSink(str(tmp_path), rank=0)
    with caplog.at_level(logging.WARNING):
        for record in run_records:
            sink.write(record)
    sink.close()
    assert not [r for r in caplog.records if "NaN or Inf" in r.getMessage()]


def test_missing_package_fails_loudly(tmp_path, hide_package):
    hide_package("tensorboardX")
    with pytest.raises(ImportError, match="pip install tensorboardX"):
        TensorBoardSink(str(tmp_path), rank=0)
    assert not (tmp_path / "tensorboard").exists()
