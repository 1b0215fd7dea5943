"""The job's answer to a hang, in one process: four ranks (tests/thread_ranks.py: real
Monitors, real heartbeats and hang watchdogs, their exchange met at a barrier as a collective
meets), rank 2 stuck in its own code before step 4 while the others wait in the exchange of
step 4. Rank 0 names rank 2 and where each rank is, once, for the job; the other ranks'
hang records say only where they wait. (The real jobs: tests/scale/test_msrun_faults.py.)"""
import json
import threading
import time

from mindwatch.runlog import heartbeats as hb
from mindwatch.sinks.alert import wants_alert
from thread_ranks import run_ranks

STUCK_STEP = 4


def _wait_for_answer(log_dir, release, deadline_s=60.0):
    """Releases the stuck rank once the job's hang record is on disk (or the time is up)."""
    end = time.monotonic() + deadline_s
    path = log_dir / "job.jsonl"
    while time.monotonic() < end:
        if path.exists() and '"kind":"hang"' in path.read_text():
            break
        time.sleep(0.05)
    release.set()


def test_rank_zero_names_the_rank_the_job_waits_for(tmp_path):
    release = threading.Event()

    def held_by_its_own_code():           # the stuck rank's own work before its step
        release.wait(60)

    def body(monitor, rank):
        for step in range(1, 7):
            if rank == 2 and step == STUCK_STEP:
                held_by_its_own_code()
            monitor.step_begins(step)
            monitor.end_step(step=step, loss=1.0 / step, grad_norm=1.0)
        monitor.close()

    waiter = threading.Thread(target=_wait_for_answer, args=(tmp_path, release))
    waiter.start()
    run_ranks(4, body, log_dir=str(tmp_path), hang_timeout_s=1.0, hardware_interval_s=None)
    waiter.join()

    hangs = [json.loads(line) for line in (tmp_path / "job.jsonl").read_text().splitlines()
             if '"kind":"hang"' in line]
    assert len(hangs) == 1, hangs
    hang = hangs[0]
    assert (hang["waiting_for"], hang["holder_count"], hang["answered_by"]) == ("2", 1, 0)
    holder = hang["holders"][0]
    assert (holder["rank"], holder["state"], holder["phase"], holder["step"]) == \
        (2, "stuck", hb.BEFORE_STEP, STUCK_STEP)
    assert "<- held_by_its_own_code (test_job_hang.py:" in holder["where"]
    assert holder["report"].endswith("anomalies/hang_step3_rank2.json")
    assert hang["waiting"] == [{"ranks": "0-1,3", "count": 3,
                                "text": "in mindwatch's exchange after step 4"}]
    assert hang["message"].startswith("the job waits for rank 2 (host ")
    assert f"in its own code before step 4: {holder['where']}; 3 ranks (0-1,3) wait in " \
        "mindwatch's exchange after step 4" in hang["message"]
    # rank 0's own hang record carries the answer and names rank 2 as its origin
    rank0 = [json.loads(line) for line in (tmp_path / "rank_0.jsonl").read_text().splitlines()
             if '"anomaly":"hang"' in line]
    assert len(rank0) == 1 and rank0[0]["origin_rank"] == 2
    assert rank0[0]["message"].endswith(hang["message"])
    assert rank0[0]["answered_by"] == 0 and wants_alert(rank0[0])     # posted, once
    # the other ranks said where they waited, and no answer of their own: not posted
    for rank in (1, 2, 3):
        records = [json.loads(line) for line in
                   (tmp_path / f"rank_{rank}.jsonl").read_text().splitlines()
                   if '"anomaly":"hang"' in line]
        assert len(records) == 1 and "the job waits for" not in records[0]["message"]
        assert records[0]["answered_by"] == 0 and not wants_alert(records[0])
    # every rank's last heartbeat: ended, completed
    beats = hb.read_beats(str(tmp_path))
    assert sorted(beats) == [0, 1, 2, 3]
    assert {(b.state, b.reason) for b in beats.values()} == {(hb.ENDED, "completed")}


def test_a_rank_that_stalls_after_the_answer_does_not_answer_again(tmp_path, clock):
    """The ranks reach a stall seconds apart (the start-up exchange): one that stalls after
    rank 0 answered and ended finds the lower ranks ended, not gone, and keeps the answer."""
    from mindwatch.background.hang_answer import HangAnswer
    from mindwatch.background.heartbeat import Heartbeat

    beat = Heartbeat(log_dir=str(tmp_path), rank=4, device=None, clock=clock, interval_s=1.0,
                     notice=lambda message: None)
    (tmp_path / hb.DIRECTORY).mkdir()
    (tmp_path / hb.DIRECTORY / hb.ANSWER_FILE).write_text(json.dumps(
        {"kind": "hang", "rank": 0, "time": clock.time() - 3.0, "step": 0,
         "waiting_for": "6", "message": "the job waits for rank 6", "answered_by": 0}))
    answer = HangAnswer(heartbeat=beat, world_size=8, clock=clock, places=dict,
                        write_job=None, sleep=clock.advance)
    assert answer.answer(step=0, stalled_s=10.0) == (0, None)      # its stall began before
    before = (tmp_path / hb.DIRECTORY / hb.ANSWER_FILE).read_text()
    # an answer older than this stall is another stall's: this rank answers (alone here)
    clock.advance(60.0)
    answered_by, fields = answer.answer(step=0, stalled_s=10.0)
    assert answered_by == 4 and fields is not None and fields["answered_by"] == 4
    assert (tmp_path / hb.DIRECTORY / hb.ANSWER_FILE).read_text() != before
