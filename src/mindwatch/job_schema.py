"""The job log's schema (``job.jsonl``, docs/log-format.md#the-job-log): the same record rules
as a rank log (records.py: ``kind``, ``rank``, ``time``; strict JSON; null for unknown), its
own kinds beside the rank log's ``run`` and ``end``.

Ranks are named compactly wherever a record could name thousands of them: a rank set is a
text like ``"0-7,13"`` (basics/rank_set.py), never a list with one entry per rank, except in
``job_ranks``, whose lists are the heatmap's rows (one value per rank, a bin of steps).
"""
from __future__ import annotations

from .records import Anomaly, End, Fields, Run, Step, optional, required

JOB_FILE = "job.jsonl"

JOB_STEP = "job_step"
EVENT = "event"
HANG = "hang"
JOB_RANKS = "job_ranks"
JOB_KINDS = (JOB_STEP, EVENT, HANG, JOB_RANKS)


class JobRun(Fields):
    """The rank log's ``run`` record (rank 0's) with where every rank runs."""
    KIND = "run"
    WORLD_SIZE = required(Run.WORLD_SIZE)
    # [{"host", "ranks" (a rank set), "devices" (each rank's device, in rank order; null
    # entries on the CPU)}], one entry per host in order of its first rank
    HOSTS = required("hosts")


class Place(Fields):
    """One entry of ``JobRun.HOSTS``."""
    HOST = required(Run.HOST)
    RANKS = required("ranks")
    DEVICES = required("devices")


class JobStep(Fields):
    """One step of the job: each field of job/fields.py as its declaration reduces it
    across ranks (a number, or a ``Spread``)."""
    KIND = JOB_STEP
    STEP = required(Step.STEP)
    LOSS = required(Step.LOSS, nonfinite=True)            # mean over ranks
    GRAD_NORM = required(Step.GRAD_NORM, nonfinite=True)  # max over ranks
    STEP_TIME_S = required(Step.STEP_TIME_S)              # Spread
    DATA_TIME_S = required(Step.DATA_TIME_S)              # Spread
    LOCAL_GRAD_NORM = required(Step.LOCAL_GRAD_NORM)      # Spread
    MEMORY_MB = required("memory_mb")                     # Spread
    SKIPPED = required(Step.SKIPPED)                      # any rank withheld the update
    RANKS = required("ranks")                             # (touched by an anomaly) a rank set


class Spread(Fields):
    """A value across ranks: the finite values' extremes with the rank of each, and their
    median; ``nonfinite`` the ranks (a rank set) whose value was not finite, when any."""
    MIN = required("min")
    MIN_RANK = required("min_rank")
    MEDIAN = required("median")
    MAX = required("max")
    MAX_RANK = required("max_rank")
    NONFINITE_RANKS = optional("nonfinite")


class Event(Fields):
    """One job-level anomaly: a step on which any rank found one."""
    KIND = EVENT
    STEP = required(Step.STEP)
    KINDS = required("kinds")                  # the anomaly kinds, over every rank
    RANKS = required("ranks")                  # the ranks that found one (a rank set)
    RANK_COUNT = required("rank_count")
    ORIGIN_RANK = required(Anomaly.ORIGIN_RANK)
    ORIGIN_HOST = required(Anomaly.ORIGIN_HOST)
    ORIGIN_DEVICE = required(Anomaly.ORIGIN_DEVICE)
    ACTIONS = required(Anomaly.ACTIONS)        # what every rank did (rank 0's decision)
    MESSAGE = required(Anomaly.MESSAGE)        # rank 0's first anomaly of the step
    REPORT = required(Anomaly.REPORT)          # the job's report (rank 0's), or null
    CHECKPOINT = required(Anomaly.CHECKPOINT)
    REPLAY_VERDICT = optional(Anomaly.REPLAY_VERDICT)
    # kind -> the ranks (a rank set) that found it, when the kinds came from several ranks
    BY_KIND = optional("by_kind")


class JobHang(Fields):
    """A step that stalled, answered from every rank's heartbeat (job/holders.py): the
    rank(s) the job waits for, where each is, and where the others wait."""
    KIND = HANG
    STEP = required(Step.STEP)                 # the last step the answering rank ended
    WAITING_FOR = required("waiting_for")      # a rank set ("" when no rank is behind)
    MESSAGE = required(Anomaly.MESSAGE)
    STALLED_S = optional("stalled_s")          # seconds without a step end on the answerer
    ANSWERED_BY = optional("answered_by")      # the rank that answered (0 unless it is gone)
    HOLDER_COUNT = optional("holder_count")
    # the first 16 of them: {rank, host, device, state ("stuck", "exited", "silent",
    # "absent"), phase, step, where, seen (its last heartbeat, Unix s), report, text}
    HOLDERS = optional("holders")
    WAITING = optional("waiting")              # [{ranks, count, text}], the largest first
    UNSEEN = optional("unseen")                # ranks of hosts with no heartbeat file


class JobRanks(Fields):
    """Each rank's value over a bin of steps (``step_from``..``step``): the report's
    ranks-by-steps heatmap. Each field of job/fields.py that declares a ``bin`` reduce, as
    a list with one entry per rank (null: unknown)."""
    KIND = JOB_RANKS
    STEP_FROM = required("step_from")
    STEP = required(Step.STEP)
    STEP_TIME_S = optional(Step.STEP_TIME_S, nonfinite=True)          # mean over the bin
    DATA_TIME_S = optional(Step.DATA_TIME_S, nonfinite=True)          # mean
    LOCAL_GRAD_NORM = optional(Step.LOCAL_GRAD_NORM, nonfinite=True)  # max
    MEMORY_MB = optional(JobStep.MEMORY_MB, nonfinite=True)           # max


class JobEnd(Fields):
    """Rank 0's ``end`` record with the job's goodput (runlog/goodput.py's figures)."""
    KIND = End.KIND
    REASON = required(End.REASON)
    STEPS = required(End.STEPS)
    GOODPUT = required("goodput")
    STOPPED_BY = optional(End.STOPPED_BY)


def bin_steps(step: int) -> int:
    """How many steps the ``job_ranks`` bin holding ``step`` spans: 10 up to step 100, 100 up
    to step 10,000, 1,000 beyond (a 200k-step run: ~300 bins; job/rank_bins.py)."""
    return 10 if step <= 100 else 100 if step <= 10_000 else 1000


def bin_spans(steps: int) -> list[tuple[int, int]]:
    """(first, last) step of each bin of a run of ``steps`` steps, one step each."""
    found, step = [], 1
    while step <= steps:
        span = bin_steps(step)
        end = min(steps, -(-step // span) * span)
        found.append((step, end))
        step = end + 1
    return found


JOB_SCHEMAS: dict[str, type[Fields]] = {
    cls.KIND: cls for cls in (JobStep, Event, JobHang, JobRanks)}
