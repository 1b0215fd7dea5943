"""What each scale job is checked for, under either launcher: one stop for all after the same
step, one origin named alike by every rank, rank 0's job.jsonl (src/mindwatch/job_schema.py)
saying so once with where every rank ran, and ``mindwatch summary`` answering for the job.
"""
from __future__ import annotations

import json
import math
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from mindwatch.runlog import read_run

NONFINITE = ("loss_nonfinite", "gradient_nonfinite")
SUMMARY_LINES = 20


@dataclass
class Job:
    """A finished job: its mindwatch log_dir, the rank whose batch was NaN and that rank's
    host, the step, where each rank ran (``hosts``: host -> its ranks, in rank order), the
    launcher run's wall time, and the alerts a webhook received (None: none was given)."""
    log_dir: Path
    world_size: int
    origin: int
    step: int
    hosts: dict[str, range]
    wall_s: float
    posts: list[dict] | None = None
    said: str = ""

    @property
    def origin_host(self) -> str:
        return next(host for host, ranks in self.hosts.items() if self.origin in ranks)


def job_records(log_dir: Path) -> list[dict]:
    with open(log_dir / "job.jsonl", encoding="utf-8") as handle:
        return [json.loads(line) for line in handle]


def rank_set(ranks: range) -> str:
    """The job log's compact rank set of a contiguous range ("0-3"; "5" for one)."""
    return str(ranks[0]) if len(ranks) == 1 else f"{ranks[0]}-{ranks[-1]}"


def assert_every_rank_stopped_after_the_step(job: Job) -> None:
    """Every rank's log: steps 1 to ``job.step``, then an end ``stopped`` by a non-finite
    kind found at that step; every rank's gradient anomaly names the same origin and host."""
    run = read_run(str(job.log_dir))
    assert [log.rank for log in run.ranks] == list(range(job.world_size)), job.said
    for log in run.ranks:
        assert [s["step"] for s in log.steps] == list(range(1, job.step + 1)), log.rank
        assert log.end["reason"] == "stopped" and log.end["steps"] == job.step, log.end
        stopped_by = log.end["stopped_by"]
        assert stopped_by["step"] == job.step and stopped_by["anomaly"] in NONFINITE, log.end
        # the reduced gradients are NaN on every rank: each rank finds it, and each names
        # the rank whose own gradients were NaN before the reduction, and its host
        [grads] = [a for a in log.anomalies if a["anomaly"] == "gradient_nonfinite"]
        assert (grads["step"], grads["origin_rank"], grads["origin_host"]) == (
            job.step, job.origin, job.origin_host), log.rank
        assert "stop" in grads["actions"], grads
    own = {log.rank: {a["anomaly"] for a in log.anomalies if a["step"] == job.step}
           for log in run.ranks}
    assert [rank for rank, kinds in own.items() if "loss_nonfinite" in kinds] == [job.origin]


def assert_job_log(job: Job) -> None:
    """job.jsonl: the ``run`` record with every rank's host, a ``job_step`` per step, one
    ``event`` at the step naming the origin, the ``end`` with the job's goodput."""
    records = job_records(job.log_dir)
    run, end = records[0], records[-1]
    assert (run["kind"], end["kind"]) == ("run", "end")
    assert run["world_size"] == job.world_size
    # on the CPU no rank has a device: null for each
    assert run["hosts"] == [{"host": host, "ranks": rank_set(ranks), "devices": [None] * len(ranks)}
                            for host, ranks in job.hosts.items()]
    steps = [r["step"] for r in records if r["kind"] == "job_step"]
    assert steps == list(range(1, job.step + 1))
    [event] = [r for r in records if r["kind"] == "event"]
    assert event["step"] == job.step and event["kinds"] == list(NONFINITE), event
    assert (event["origin_rank"], event["origin_host"], event["origin_device"]) == (
        job.origin, job.origin_host, None), event
    assert (event["ranks"], event["rank_count"]) == (
        rank_set(range(job.world_size)), job.world_size), event
    assert event["by_kind"] == {"loss_nonfinite": str(job.origin),
                                "gradient_nonfinite": rank_set(range(job.world_size))}, event
    assert "stop" in event["actions"], event
    assert (end["reason"], end["steps"]) == ("stopped", job.step), end
    # the job's goodput: its wall time, all of it either productive or lost to a cause
    goodput = end["goodput"]
    assert goodput["wall_s"] > 0 and 0 < goodput["share"] <= 1, goodput
    assert math.isclose(goodput["productive_s"] + sum(goodput["lost_s"].values()),
                        goodput["wall_s"], abs_tol=1e-5), goodput
    assert math.isclose(goodput["share"], goodput["productive_s"] / goodput["wall_s"],
                        abs_tol=1e-5), goodput


def assert_summary_answers_for_the_job(job: Job) -> None:
    """``mindwatch summary LOG_DIR``: exit status 1 (an anomaly), at most SUMMARY_LINES lines
    whatever the number of ranks, naming the origin rank and its host."""
    done = subprocess.run([sys.executable, "-m", "mindwatch.cli", "summary", str(job.log_dir)],
                          capture_output=True, text=True, timeout=120)
    said = f"exit status {done.returncode}\n{done.stdout}\n{done.stderr[-2000:]}"
    assert done.returncode == 1, said
    assert len(done.stdout.splitlines()) <= SUMMARY_LINES, said
    assert re.search(rf"\brank {job.origin}\b", done.stdout), said
    assert re.search(rf"\b{re.escape(job.origin_host)}\b", done.stdout), said


def assert_ends_name_the_origin(job: Job) -> None:
    """Each rank's ``end`` and the job's name the rank the stop came from (its
    ``stopped_by.rank``), as the job's ``event`` does."""
    run = read_run(str(job.log_dir))
    assert {log.rank: log.end["stopped_by"]["rank"] for log in run.ranks} == \
        {rank: job.origin for rank in range(job.world_size)}
    assert job_records(job.log_dir)[-1]["stopped_by"]["rank"] == job.origin


def assert_ledger_names_the_origin(job: Job) -> None:
    """bad_batches.jsonl (issue #46) holds one batch: the origin rank's, at the job's step,
    written by that rank alone (the others' batches were innocent)."""
    with open(job.log_dir / "bad_batches.jsonl", encoding="utf-8") as handle:
        ledger = [json.loads(line) for line in handle]
    assert [(e["origin_rank"], e["step"]) for e in ledger] == [(job.origin, job.step)], ledger
    assert "loss_nonfinite" in ledger[0]["kinds"], ledger
