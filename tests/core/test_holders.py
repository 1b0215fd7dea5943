"""Which rank holds the job (job/holders.py), from heartbeats made by hand: the exact record
fields and message for each kind of holder, and the heartbeat's own rules (staleness, the
order of phases, the files it reads)."""
import json

import pytest

from mindwatch.job.holders import answer, phase_text
from mindwatch.runlog import heartbeats as hb

NOW = 1_700_000_100.0


def beat(rank, phase=hb.IN_STEP, step=30, *, time=NOW - 0.2, state=hb.RUNNING, host="node-a",
         where=None, loader=False, reason=None, interval=1.0):
    return hb.Beat(rank=rank, host=host, device=rank, pid=1000 + rank, time=time,
                   interval_s=interval, phase=phase, step=step, since=NOW - 10, where=where,
                   data_loader=loader, state=state, reason=reason)


def test_the_rank_stuck_in_its_own_code_holds_the_ranks_in_the_step():
    beats = {r: beat(r) for r in range(8)}
    beats[6] = beat(6, hb.BEFORE_STEP, where="sleep (train.py:42) <- main (train.py:80)",
                    state=hb.STALLED)
    found = answer(beats, 8, now=NOW, step=29)
    assert found["waiting_for"] == "6" and found["holder_count"] == 1
    holder = found["holders"][0]
    assert (holder["rank"], holder["host"], holder["device"], holder["state"]) == \
        (6, "node-a", 6, "stuck")
    assert holder["text"] == ("in its own code before step 30: sleep (train.py:42) <- main "
                              "(train.py:80)")
    assert found["waiting"] == [{"ranks": "0-5,7", "count": 7,
                                 "text": "in step 30 (the step's collectives)"}]
    assert found["message"] == (
        "the job waits for rank 6 (host node-a, device 6): in its own code before step 30: "
        "sleep (train.py:42) <- main (train.py:80); 7 ranks (0-5,7) wait in step 30 (the "
        "step's collectives)")


def test_a_data_loader_and_the_places_the_exchange_knows():
    beats = {r: beat(r) for r in range(4)}
    beats[1] = beat(1, hb.BEFORE_STEP, loader=True, host="wrong")
    places = {r: ("node-b" if r else "node-a", None) for r in range(4)}   # no devices: a CPU
    found = answer(beats, 4, now=NOW, step=29, places=places)
    assert found["holders"][0]["text"] == "in its data loader before step 30"
    assert found["message"].startswith("the job waits for rank 1 (host node-b): in its data "
                                       "loader before step 30; 3 ranks (0,2-3) wait")


@pytest.mark.parametrize(("change", "state", "text"), [
    (dict(time=NOW - 30), "silent",
     "no heartbeat for 30 s: its process died or its host cannot be reached; last seen in "
     "step 30 at "),
    (dict(state=hb.ENDED, reason="completed"), "exited",
     "its process ended (completed) in step 30"),
])
def test_a_rank_that_will_never_come_holds_the_job_though_it_got_as_far(change, state, text):
    beats = {r: beat(r) for r in range(4)}
    beats[3] = beat(3, **change)
    found = answer(beats, 4, now=NOW, step=29)
    assert found["waiting_for"] == "3" and found["holders"][0]["state"] == state
    assert found["holders"][0]["text"].startswith(text)


def test_a_rank_with_no_heartbeat_and_one_known_dead():
    beats = {r: beat(r) for r in (0, 1, 3)}
    found = answer(beats, 4, now=NOW, step=0, gone={1: True})
    assert found["waiting_for"] == "1-2" and found["holder_count"] == 2
    assert [h["state"] for h in found["holders"]] == ["silent", "absent"]
    assert found["holders"][1]["text"].startswith("no heartbeat: it never reached mindwatch")
    assert found["message"].startswith("the job waits for 2 ranks (1, 2); rank 1 (host node-a, "
                                       "device 1): no heartbeat for 0 s")


def test_a_rank_that_never_started_holds_the_ranks_in_the_startup_exchange():
    beats = {r: beat(r, hb.STARTUP_EXCHANGE, 0) for r in range(4)}
    beats[2] = beat(2, hb.STARTING, 0, where="sleep (train.py:12)")
    found = answer(beats, 4, now=NOW, step=0)
    assert found["waiting_for"] == "2"
    assert found["holders"][0]["text"] == \
        "never started: still in its start-up: sleep (train.py:12)"
    assert found["waiting"][0]["text"] == "in the ranks' start-up exchange"


def test_no_rank_behind_and_a_host_not_seen():
    beats = {r: beat(r) for r in range(4)}
    places = {r: ("node-a" if r < 4 else "node-b", r) for r in range(8)}
    found = answer(beats, 8, now=NOW, step=29, places=places)
    assert found["waiting_for"] == "" and found["holders"] == [] and found["unseen"] == "4-7"
    assert found["message"] == (
        "no rank is behind: every rank that can be seen is at the same place, so a collective "
        "does not complete (a network or device fault, or a rank its launcher lost); 4 ranks "
        "(0-3) wait in step 30 (the step's collectives); ranks 4-7 not seen (no heartbeat "
        "from their hosts: the run directory is not shared with them, or they never started)")


def test_the_order_of_phases_and_staleness():
    order = [beat(0, hb.STARTING, 0), beat(0, hb.STARTUP_EXCHANGE, 0),
             beat(0, hb.BEFORE_STEP, 1), beat(0, hb.IN_STEP, 1), beat(0, hb.EXCHANGE, 1),
             beat(0, hb.EVALUATING, 1), beat(0, hb.BEFORE_STEP, 2)]
    positions = [b.position() for b in order]
    assert positions == sorted(positions) and len(set(positions)) == len(positions)
    # 3 periods of 1 s and a 2 s margin
    assert not beat(0, time=NOW - 5.0).stale(NOW) and beat(0, time=NOW - 5.01).stale(NOW)
    assert not beat(0, time=NOW - 60, state=hb.ENDED).stale(NOW)
    assert phase_text(beat(0, hb.EXCHANGE, 7)) == "in mindwatch's exchange after step 7"


def test_read_beats_skips_what_is_not_a_heartbeat(tmp_path):
    folder = tmp_path / hb.DIRECTORY
    folder.mkdir()
    good = {"rank": 2, "host": "h", "device": None, "pid": 5, "time": 1.0, "interval_s": 1.0,
            "phase": "in_step", "step": 3, "since": 0.5}
    (folder / "rank_2.json").write_text(json.dumps(good))
    (folder / "rank_3.json").write_text(json.dumps({**good, "rank": 4}))   # not its own
    (folder / "rank_5.json").write_text("{torn")
    (folder / "rank_x.json").write_text(json.dumps(good))
    (folder / "hang_answer.json").write_text(json.dumps({"kind": "hang"}))
    assert list(hb.read_beats(str(tmp_path))) == [2]
    assert hb.read_beats(str(tmp_path / "nowhere")) == {}
    assert hb.read_answer(str(tmp_path)) == {"kind": "hang"}


def _write_beats(folder, times, interval=1.0):
    folder.mkdir(parents=True)
    for rank, at in times.items():
        (folder / f"rank_{rank}.json").write_text(json.dumps({
            "rank": rank, "host": "h", "device": None, "pid": 1, "time": at,
            "interval_s": interval, "phase": "in_step", "step": 9, "since": at - 1}))


def test_the_rank_whose_heartbeat_stopped_first_when_a_job_died_as_one(tmp_path):
    from mindwatch.runlog.job.silent_ranks import stopped_first
    _write_beats(tmp_path / hb.DIRECTORY, {0: 100.9, 1: 101.0, 2: 100.2, 3: 100.8})
    assert stopped_first(str(tmp_path), range(4)) == {
        2: "its heartbeat stopped first, 0.6 s before any other rank's (the likeliest to "
           "have died first)"}
    # within half a period of the next one, it cannot be told
    _write_beats(tmp_path / "b" / hb.DIRECTORY, {0: 100.9, 1: 101.0, 2: 100.5})
    assert stopped_first(str(tmp_path / "b"), range(3)) == {}
    assert stopped_first(str(tmp_path / "none"), range(3)) == {}
