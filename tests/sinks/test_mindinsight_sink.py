"""The MindInsight sink: MindSpore's summary framing (both CRCs checked by an independent
reader), MindSpore's own ``Event`` protobuf, and coexistence with a real SummaryCollector."""
import glob
import math
import os
import re
import struct
import time

import mindspore as ms
import numpy as np
import pytest
from mindspore import nn
from mindspore.train import Callback, Model, SummaryCollector
from mindspore.train.summary.summary_record import SummaryRecord
from mindspore.train.summary_pb2 import Event
from tensorboardX.crc32c import crc32c as reference_crc32c

from mindwatch.mindspore.compat import summary_event_class
from mindwatch.mindspore.sinks import mindinsight
from mindwatch.mindspore.sinks.mindinsight import MindInsightSink


def _masked(data):
    crc = reference_crc32c(data)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def parse_summary_file(path):
    """Framing as MindInsight's loader reads it: <Q length, <I masked crc32c(length bytes),
    data, <I masked crc32c(data); every CRC must match and the file must end on a record."""
    with open(path, "rb") as file:
        data = file.read()
    events, offset = [], 0
    while offset < len(data):
        header = data[offset:offset + 8]
        (length,) = struct.unpack("<Q", header)
        assert struct.unpack("<I", data[offset + 8:offset + 12])[0] == _masked(header)
        payload = data[offset + 12:offset + 12 + length]
        assert len(payload) == length
        crc = data[offset + 12 + length:offset + 16 + length]
        assert struct.unpack("<I", crc)[0] == _masked(payload)
        events.append(Event.FromString(payload))
        offset += 16 + length
    return events


def scalars_by_tag(events):
    out = {}
    for event in events:
        if event.HasField("summary"):
            for value in event.summary.value:
                out.setdefault(value.tag, []).append((event.step, event.wall_time,
                                                      value.scalar_value))
    return out


@pytest.mark.parametrize("crc32c", [mindinsight.crc32c, mindinsight.crc32c_python],
                         ids=["default", "pure-python"])
def test_crc32c_matches_the_standard_check_value(crc32c):
    assert crc32c(b"123456789") == 0xE3069283
    for blob in (b"", b"a", bytes(range(256)) * 3):
        assert crc32c(blob) == reference_crc32c(blob)


def test_the_compiled_crc32c_is_used_when_installed():
    import google_crc32c  # pinned in requirements.lock
    assert mindinsight.crc32c is google_crc32c.value


def test_values_read_back(tmp_path, run_records, expected_scalars, float32_equal):
    sink = MindInsightSink(str(tmp_path), rank=3, event_class=Event)
    for record in run_records:
        sink.write(record)
    sink.close()
    sink.close()                                            # idempotent

    directory = tmp_path / "summary" / "mindwatch_rank3"
    (name,) = os.listdir(directory)
    assert name == os.path.basename(sink.path)
    # MindSpore's naming (get_event_file_name) with our prefix; MindInsight's filters.
    assert re.fullmatch(r"mindwatch\.out\.events\.summary\.\d+\.3\.[\w.-]+_MS", name)
    assert re.search(r"summary\.\d+", name) and not name.endswith(("_lineage", "_explain"))

    events = parse_summary_file(str(directory / name))
    assert events[0].version == "MindSpore.Event:1"        # as SummaryWriter.init_writer
    assert list(mindinsight.read_events(str(directory / name), Event)) == events
    got = scalars_by_tag(events[1:])
    assert set(got) == set(expected_scalars)
    for tag, expected in expected_scalars.items():
        assert [step for step, _, _ in got[tag]] == [step for step, _, _ in expected], tag
        for (_, wall, value), (_, want_wall, want) in zip(got[tag], expected, strict=True):
            assert float32_equal(value, want), (tag, value, want)
            assert wall == pytest.approx(want_wall, abs=1e-6)


def test_each_record_is_on_disk_at_once_and_a_torn_tail_is_ignored(tmp_path, run_records):
    sink = MindInsightSink(str(tmp_path), event_class=Event)
    sink.write(run_records[1])
    events = parse_summary_file(sink.path)                  # not closed, nothing buffered
    assert [e.step for e in events] == [0, 1]
    with open(sink.path, "ab") as file:                     # a record cut short
        file.write(struct.pack("<Q", 100) + b"\0\0")
    assert len(list(mindinsight.read_records(sink.path))) == 2
    sink.close()


def test_a_second_sink_in_the_same_second_gets_its_own_file(tmp_path):
    first = MindInsightSink(str(tmp_path), event_class=Event)
    second = MindInsightSink(str(tmp_path), event_class=Event)
    assert first.path != second.path
    first.close()
    second.close()


def test_missing_mindspore_fails_loudly(hide_package):
    hide_package("mindspore")
    with pytest.raises(ImportError, match="pip install mindspore"):
        summary_event_class()


class _FeedMindInsight(Callback):
    """What a monitoring callback does: builds step records and hands them to the sink. The
    sink is opened at train begin, when the user's SummaryCollector already holds the one
    SummaryRecord this process may have."""

    def __init__(self, log_dir):
        super().__init__()
        self.log_dir = log_dir
        self.sink = None
        self.losses = {}
        self.records_open_at_begin = None

    def on_train_begin(self, run_context):
        self.records_open_at_begin = SummaryRecord.count
        self.sink = MindInsightSink(self.log_dir, rank=0, event_class=Event)

    def on_train_step_end(self, run_context):
        cb = run_context.original_args()
        outputs = cb.net_outputs
        loss = float((outputs[0] if isinstance(outputs, (tuple, list)) else outputs).asnumpy())
        self.losses[cb.cur_step_num] = loss
        self.sink.write({"kind": "step", "rank": 0, "time": time.time(),
                         "step": cb.cur_step_num, "epoch": cb.cur_epoch_num, "loss": loss,
                         "loss_smooth": None, "lr": 0.01, "grad_norm": None,
                         "step_time_s": None, "samples_per_s": None, "skipped": False})

    def on_train_end(self, run_context):
        self.sink.close()


@pytest.mark.summary_collector
@pytest.mark.fresh_process
def test_coexists_with_a_users_summary_collector(tmp_path, graph_mode):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((64, 4)).astype(np.float32)
    y = (x @ np.array([[1.0], [-2.0], [0.5], [3.0]], np.float32)).astype(np.float32)
    dataset = ms.dataset.NumpySlicesDataset({"x": x, "y": y}, shuffle=False).batch(8)
    ms.set_seed(0)
    net = nn.Dense(4, 1)
    model = Model(net, nn.MSELoss(), nn.SGD(net.trainable_params(), learning_rate=0.01))

    summary_dir = str(tmp_path / "summary")
    collector = SummaryCollector(summary_dir=summary_dir, collect_freq=1,
                                 collect_specified_data={"collect_graph": False})
    feed = _FeedMindInsight(str(tmp_path))
    model.train(1, dataset, callbacks=[collector, feed], dataset_sink_mode=False)

    assert feed.records_open_at_begin == 1                  # the collector's, and only it
    assert sorted(feed.losses) == list(range(1, 9))
    theirs = [p for p in glob.glob(os.path.join(summary_dir, "*summary.*")) if p.endswith("_MS")]
    assert len(theirs) == 1, os.listdir(summary_dir)
    (ours,) = glob.glob(os.path.join(summary_dir, "mindwatch_rank0", "mindwatch.*_MS"))

    # The collector's file, written by MindSpore's C++ EventWriter, passes the same reader:
    # the framing and CRCs we write are MindSpore's.
    their_loss = {step: value for step, _, value
                  in scalars_by_tag(parse_summary_file(theirs[0]))["loss/auto"]}
    our_loss = {step: value for step, _, value
                in scalars_by_tag(parse_summary_file(ours))["train/loss"]}
    assert sorted(our_loss) == list(range(1, 9))
    for step, loss in feed.losses.items():
        assert our_loss[step] == np.float32(loss)
        assert math.isfinite(loss)
    for step in set(their_loss) & set(our_loss):            # the same loss, seen by both
        assert our_loss[step] == pytest.approx(their_loss[step], rel=1e-6)
    assert set(their_loss) & set(our_loss)
