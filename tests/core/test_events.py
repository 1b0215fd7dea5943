"""One step's anomalies as one event: grouping of records (new logs and old), the acting
anomaly, the one line; the console prints it when the records are written, with the
hardware findings acted on at that step end; a sink that shows them together loses and
counts them together."""
import io

from mindwatch import Monitor
from mindwatch.events import Event, event_line, group, joined
from mindwatch.observation import DeviceSample, HardwareSample
from mindwatch.sinks.base import Sink
from mindwatch.sinks.sink_set import SinkSet

VERDICT = "computed again on the same batch and weights it came out bit-identical: ..."


def _anomaly(kind, step, actions=("warn",), rank=0, **fields):
    return {"kind": "anomaly", "rank": rank, "time": 1.0, "anomaly": kind, "step": step,
            "value": 1.0, "threshold": 0.5, "message": f"{kind} message",
            "actions": list(actions), "checkpoint": None, "report": None, **fields}


def test_adjacent_records_of_one_rank_and_step_are_one_event():
    records = [_anomaly("loss_spike", 5), _anomaly("grad_spike", 5),
               _anomaly("loss_spike", 6), _anomaly("loss_spike", 5),       # 5 again: not adjacent
               _anomaly("loss_spike", 6, rank=1), _anomaly("hang", 6, rank=1),
               _anomaly("overheat", 6, rank=1), _anomaly(None, None), _anomaly("x", None)]
    events = group(records)
    assert [(e.rank, e.step, [r["anomaly"] for r in e.records]) for e in events] == [
        (0, 5, ["loss_spike", "grad_spike"]), (0, 6, ["loss_spike"]), (0, 5, ["loss_spike"]),
        (1, 6, ["loss_spike"]), (1, 6, ["hang"]),      # a hang is alone: after the step, stuck
        (1, 6, ["overheat"]), (0, None, [None, "x"])]


def test_the_line_names_the_kinds_the_acting_anomaly_its_checkpoint_and_the_verdict_once():
    explode = _anomaly("gradient_explode", 120, ("checkpoint", "stop"), checkpoint="c.ckpt",
                       report="r.json", replay_verdict=VERDICT)
    event = Event((_anomaly("loss_spike", 120, replay_verdict=VERDICT), explode,
                   _anomaly("grad_spike", 120, replay_verdict=VERDICT)))
    assert event.lead is explode and event.kinds == ["gradient_explode", "loss_spike",
                                                     "grad_spike"]
    assert (event.checkpoint, event.report, event.verdict) == ("c.ckpt", "r.json", VERDICT)
    assert event_line(event, " (epoch 1 step 120)") == (
        "gradient_explode, loss_spike, grad_spike at step 120 (epoch 1 step 120): "
        f"gradient_explode message; {VERDICT} [checkpoint+stop -> c.ckpt]")
    # skip with a stop escalated beats a plain checkpoint_and_stop; equals: the first acts
    skip = _anomaly("loss_spike", 3, ("skip", "checkpoint", "stop"))
    assert Event((_anomaly("a", 3, ("checkpoint", "stop")), skip)).lead is skip
    first = _anomaly("a", 3)
    assert Event((first, _anomaly("b", 3))).lead is first


def test_an_old_log_reads_the_same_its_verdict_said_once_in_the_lead_message():
    """Before replay_verdict, each message ended with the verdict."""
    records = [dict(_anomaly(kind, 7, actions), message=f"{kind} message; {VERDICT}")
               for kind, actions in (("loss_nonfinite", ("checkpoint", "stop")),
                                     ("gradient_nonfinite", ("checkpoint", "stop")))]
    [event] = group(records)
    line = event_line(event)
    assert line == (f"loss_nonfinite, gradient_nonfinite at step 7: loss_nonfinite message; "
                    f"{VERDICT} [checkpoint+stop]")
    assert line.count("computed again") == 1 and event.verdict is None


def test_an_event_cut_between_two_reads_is_joined():
    past = group([_anomaly("a", 1), _anomaly("b", 2)])
    recent = group([_anomaly("c", 2), _anomaly("d", 3)])
    events = joined(past, recent)
    assert [[r["anomaly"] for r in e.records] for e in events] == [["a"], ["b", "c"], ["d"]]
    assert [r["anomaly"] for r in past[1].records] == ["b"]     # the parts are left as they were
    hung = joined(group([_anomaly("hang", 2)]), group([_anomaly("c", 2), _anomaly("d", 2)]))
    assert [[r["anomaly"] for r in e.records] for e in hung] == [["hang"], ["c", "d"]]
    assert len(joined(group([_anomaly("a", 2)]), group([_anomaly("b", 2, rank=1)]))) == 2


def _hot(clock):
    return HardwareSample(time=clock.time(), devices=[DeviceSample(
        type="npu", index=0, util_percent=90.0, mem_used_mb=1.0, mem_total_mb=2.0,
        temp_c=99.0)])


def test_the_console_prints_the_steps_findings_and_the_held_hardware_ones_as_one_line(
        tmp_path, clock):
    out = io.StringIO()
    monitor = Monitor(str(tmp_path), clock=clock, stream=out, print_interval=1000,
                      hardware_interval_s=None, overheat_samples=1,
                      on_anomaly={"overheat": "warn"})
    monitor.observe(step=1, loss=1.0)
    monitor.submit_hardware(_hot(clock))        # as from the sampler thread: held for the step
    assert out.getvalue().count("ANOMALY") == 0
    monitor.observe(step=2, loss=float("nan"))
    lines = [line for line in out.getvalue().splitlines() if "ANOMALY" in line]
    # printed as the step's records were written, before any later step
    assert lines == ["[rank 0] ANOMALY loss_nonfinite, overheat at step 2: loss is nan at step "
                     "2 [checkpoint+stop]"]
    monitor.close()
    log = (tmp_path / "rank_0.jsonl").read_text()
    assert log.count('"kind":"anomaly"') == 2                     # one record per kind


class _Shows(Sink):
    """A sink that shows records written together, and fails while ``broken``."""

    def __init__(self):
        self.calls, self.broken = [], False

    def write(self, record):
        self.write_many([record])

    def write_many(self, records):
        if self.broken:
            raise OSError("gone")
        self.calls.append([r["anomaly"] for r in records])


class _Lines(Sink):
    def __init__(self):
        self.records = []

    def write(self, record):
        self.records.append(record["anomaly"])


def test_the_sink_set_hands_records_together_to_the_sinks_that_show_them_so():
    said = []
    shows, lines = _Shows(), _Lines()
    sinks = SinkSet([shows, lines], say=lambda sink, message: said.append(message))
    sinks.write_many([_anomaly("a", 1), _anomaly("b", 1)])
    assert shows.calls == [["a", "b"]] and lines.records == ["a", "b"]
    shows.broken = True
    sinks.write_many([_anomaly("c", 2), _anomaly("d", 2), _anomaly("e", 2)])
    shows.broken = False
    sinks.write(_anomaly("f", 3))
    assert lines.records == ["a", "b", "c", "d", "e", "f"]
    assert said[-1] == "_Shows writes again (3 records lost while it could not)"
