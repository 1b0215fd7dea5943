"""runlog/run_tail.py: what a resumed run reads back from its log, on logs written line by
line as the writer writes them (records.encode), with msgspec and with the standard path."""
import pytest

from mindwatch import records
from mindwatch.runlog import RunLogError
from mindwatch.runlog.run_tail import RunTail

RUN = {"kind": "run", "rank": 0, "time": 1.0, "schema": 1, "world_size": 1, "host": "h",
       "pid": 1, "config": {}, "versions": {}, "log_path": "x", "total_steps": None, "argv": []}


def step(number, loss=2.0, lr=1e-3, skipped=False, **more):
    return {"kind": "step", "rank": 0, "time": 1.0 + number, "step": number, "epoch": 1,
            "loss": loss, "loss_smooth": loss, "lr": lr, "grad_norm": 1.0,
            "step_time_s": 0.1, "skipped": skipped, **more}


def state(number, ratio=1e-3, layers=("fc",)):
    return {"kind": "state", "rank": 0, "time": 1.0 + number, "step": number,
            "weight_norm": 1.0, "update_norm": ratio,
            "layers": {layer: {"weight_norm": 1.0, "update_norm": ratio, "update_ratio": ratio}
                       for layer in layers}}


def rewind(at, to):
    return {"kind": "rewind", "rank": 0, "time": 1.0 + at, "step": at, "to_step": to,
            "anomaly": "loss_spike", "rewinds": 1}


def segment(steps):
    return [RUN, *steps]


@pytest.fixture(params=["msgspec", "json"])
def write(request, tmp_path, monkeypatch):
    """A log of these records (and, after them, raw bytes); both ways of reading it."""
    if request.param == "json":
        monkeypatch.setenv("MINDWATCH_JSON", "json")

    def write(lines, tail=b"", steps=5, states=2):
        path = tmp_path / "rank_0.jsonl"
        path.write_bytes(b"".join(records.encode(r).encode() + b"\n" for r in lines) + tail)
        return RunTail(str(path), steps=steps, states=states).read()
    return write


def steps_of(lineage):
    return [(r["kind"], r["step"]) for r in lineage.records]


def test_the_tail_holds_the_steps_the_rules_need_and_the_peak_is_the_whole_runs(write):
    log = [step(1, lr=1e-4), step(2, lr=1e-3), *[step(n, lr=1e-4) for n in range(3, 21)]]
    lineage = write(segment(log), steps=5).lineage()
    assert steps_of(lineage) == [("step", n) for n in range(16, 21)]
    assert (lineage.last_step, lineage.lr_peak, lineage.steps) == (20, 1e-3, 5)


def test_withheld_steps_raise_no_peak_and_do_not_count_as_the_rules_steps(write):
    log = [*[step(n) for n in range(1, 8)], step(8, lr=5.0, skipped=True), step(9),
           step(10, lr=float("nan"))]
    lineage = write(segment(log), steps=3).lineage()
    assert steps_of(lineage) == [("step", 7), ("step", 8), ("step", 9), ("step", 10)]
    assert lineage.lr_peak == 1e-3


def test_every_groups_lr_counts_towards_the_peak(write):
    log = [step(1, lr=1e-4, lr_groups=[1e-4, 3e-3]), step(2, lr=1e-4, lr_groups=[1e-4, 1e-3])]
    assert write(segment(log)).lineage().lr_peak == 3e-3


def test_the_steps_a_rewind_undid_are_left_out(write):
    log = [*[step(n) for n in range(1, 11)], *[step(n, loss=50.0) for n in range(11, 14)],
           rewind(13, 10), step(11), step(12)]
    lineage = write(segment(log), steps=6).lineage()
    assert steps_of(lineage) == [("step", n) for n in (7, 8, 9, 10, 11, 12)]
    assert all(r["loss"] == 2.0 for r in lineage.records)
    assert (lineage.rewinds, lineage.left_out) == (1, 3)


def test_a_trainer_resuming_earlier_leaves_the_later_steps_out_however_far_back(write):
    log = [step(n, lr=1e-3 if n <= 10 else 1e-2) for n in range(1, 101)]
    tail = write(segment(log), steps=4)        # keeps no more than it needs: 90 steps back
    lineage = tail.lineage(after_step=10)
    assert steps_of(lineage) == [("step", n) for n in (7, 8, 9, 10)]
    assert (lineage.last_step, lineage.left_out, lineage.lr_peak) == (10, 90, 1e-3)
    assert tail.lineage().last_step == 100 and tail.lineage().lr_peak == 1e-2


def test_segments_that_count_from_one_again_are_one_history(write):
    # MindSpore's Model.train counts every call's steps from 1; the trainer says after_step 0
    log = [*[step(n, loss=1.0) for n in range(1, 4)], RUN, *[step(n) for n in range(1, 4)]]
    lineage = write(segment(log), steps=5).lineage(after_step=0)
    assert steps_of(lineage) == [("step", 2), ("step", 3), ("step", 1), ("step", 2),
                                 ("step", 3)]


def test_state_records_come_back_within_reach_newest_last(write):
    log = []
    for n in range(1, 31):
        log.append(step(n))
        if n % 10 == 0:
            log.append(state(n, ratio=n * 1e-4))
    lineage = write(segment(log), steps=2, states=2).lineage()
    assert steps_of(lineage) == [("state", 20), ("step", 29), ("step", 30), ("state", 30)]
    assert lineage.records[-1]["layers"]["fc"]["update_ratio"] == pytest.approx(3e-3)


def test_the_smoothed_loss_and_the_last_epoch_mean_are_the_runs_last(write):
    epoch = {"kind": "epoch", "rank": 0, "time": 5.0, "epoch": 1, "loss_mean": 2.5,
             "steps": 4}
    log = [step(1), step(2), step(3, loss=3.0), step(4, loss_smooth=2.25), epoch, step(5)]
    lineage = write(segment(log)).lineage()
    assert (lineage.loss_smooth, lineage.epoch_mean) == (2.0, 2.5)
    assert write(segment(log[:-2])).lineage().epoch_mean is None


def test_a_torn_last_line_and_a_torn_line_inside_are_skipped(write):
    log = [step(1), step(2)]
    tail = write(segment(log), tail=records.encode(step(3)).encode()[:30])
    assert steps_of(tail.lineage()) == [("step", 1), ("step", 2)] and tail.skipped == 1
    whole = write(segment(log), tail=records.encode(step(3)).encode())   # no newline yet
    assert whole.lineage().last_step == 3


def test_a_file_that_is_no_run_log_raises(tmp_path):
    (tmp_path / "rank_0.jsonl").write_text('{"kind": "step"}\n')
    with pytest.raises(RunLogError, match="the first record is not a 'run' record"):
        RunTail(str(tmp_path / "rank_0.jsonl"), steps=3, states=0).read()


def test_a_run_of_withheld_updates_is_read_back_four_times_the_steps_needed_at_most(write):
    log = [*[step(n) for n in range(1, 4)], *[step(n, skipped=True) for n in range(4, 30)]]
    lineage = write(segment(log), steps=2).lineage()
    assert steps_of(lineage) == [("step", n) for n in range(22, 30)]
    assert (lineage.last_step, lineage.lr_peak) == (29, 1e-3)


def test_lines_across_chunks_and_lines_over_the_cap_read_as_in_one_chunk(write, monkeypatch):
    from mindwatch.runlog import run_tail
    log = []
    for n in range(1, 41):
        log.append(step(n, lr=1e-3 * n))
        if n % 10 == 0:           # 20 layers: ~1.4 kB, longer than any step line
            log.append(state(n, ratio=n * 1e-4, layers=[f"layer{i}" for i in range(20)]))
    whole = write(segment(log), steps=6, states=3).lineage()
    monkeypatch.setattr(run_tail, "CHUNK_BYTES", 97)       # every line across chunks
    chunked = write(segment(log), steps=6, states=3)
    assert chunked.lineage() == whole and len(whole.records) == 9
    # a cap under a state line's length: those lines are skipped, the steps read alike
    monkeypatch.setattr(run_tail, "MAX_LINE_BYTES", 1000)
    capped = write(segment(log), steps=6, states=3)
    assert capped.skipped == 4 and capped.lineage().records == [
        r for r in whole.records if r["kind"] == "step"]
