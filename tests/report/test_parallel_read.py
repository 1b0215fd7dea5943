"""Large runs are read one rank per process; the result, errors included, is the one of
reading the ranks one after the other here."""
import json
import threading

import pytest

from mindwatch.runlog import FIRST, RunLogError, parallel, read_run


def _run(directory, ranks=3, steps=300):
    for rank in range(ranks):
        lines = [{"kind": "run", "rank": rank, "time": 0.0, "schema": 1, "world_size": ranks,
                  "host": "h", "pid": 1, "config": {}, "versions": {}}]
        lines += [{"kind": "step", "rank": rank, "time": float(s), "step": s, "epoch": 1,
                   "loss": 1.0 / s + rank, "loss_smooth": 1.0, "lr": 1e-3, "grad_norm": 1.0,
                   "step_time_s": 0.1 * (rank + 1), "skipped": s % 7 == 0}
                  for s in range(1, steps + 1)]
        text = "\n".join(map(json.dumps, lines)) + "\n" + ("torn {" if rank == 1 else "")
        (directory / f"rank_{rank}.jsonl").write_text(text)


def _seen(run):
    return [(log.rank, log.skipped, log.skipped_at, log.torn_tail, log.size, repr(log.scan))
            for log in run.ranks]


@pytest.fixture
def in_processes(monkeypatch):
    calls = []
    real = parallel.ProcessPoolExecutor

    def counted(*args, **kwargs):
        calls.append(kwargs["mp_context"].get_start_method())
        return real(*args, **kwargs)
    monkeypatch.setattr(parallel, "ProcessPoolExecutor", counted)
    monkeypatch.setattr(parallel, "cpus", lambda: 2)
    monkeypatch.setattr(parallel, "PARALLEL_MIN_BYTES", 0)
    return calls


def test_processes_read_what_this_process_reads(tmp_path, monkeypatch, in_processes):
    # Alone in the process, as a view is: threads earlier tests left (a monitor nobody
    # closed keeps its hang watchdog until it is collected) would rightly rule fork out.
    monkeypatch.setattr(parallel.threading, "active_count", lambda: 1)
    _run(tmp_path)
    parallel_run = read_run(str(tmp_path))
    assert in_processes == ["fork"]
    monkeypatch.setattr(parallel, "PARALLEL_MIN_BYTES", 10**12)
    assert _seen(parallel_run) == _seen(read_run(str(tmp_path)))
    assert parallel_run.ranks[1].torn_tail and parallel_run.ranks[1].records[-1]["step"] == 300


def test_the_first_rank_that_fails_raises(tmp_path, in_processes):
    _run(tmp_path, ranks=4)
    for rank in (2, 3):
        (tmp_path / f"rank_{rank}.jsonl").write_text("not a log\n")
    with pytest.raises(RunLogError, match=r"rank_2\.jsonl"):
        read_run(str(tmp_path))


def test_with_other_threads_running_no_fork(tmp_path, in_processes):
    """Forking a process that runs other threads may copy a lock that one of them holds."""
    _run(tmp_path, ranks=2)
    stop = threading.Event()
    thread = threading.Thread(target=stop.wait)
    thread.start()
    try:
        run = read_run(str(tmp_path))
    finally:
        stop.set()
        thread.join()
    assert in_processes == ["forkserver"] and run.ranks[1].scan.step_count == 300


def test_the_report_reads_its_states_rank_here_beside_the_workers(tmp_path, monkeypatch,
                                                                   in_processes):
    """read_run(states=FIRST): rank 0's log, whose state columns the report draws, is read
    in this process while the workers read the others; the result, errors included, is
    still the sequential one."""
    monkeypatch.setattr(parallel.threading, "active_count", lambda: 1)
    _run(tmp_path, ranks=3)
    submitted = []
    made = parallel.ProcessPoolExecutor                # in_processes' counting one

    def counted(*args, **kwargs):
        pool = made(*args, **kwargs)
        submit = pool.submit

        def count(fn, path, rank, **options):
            submitted.append(rank)
            return submit(fn, path, rank, **options)
        pool.submit = count
        return pool
    monkeypatch.setattr(parallel, "ProcessPoolExecutor", counted)
    first = read_run(str(tmp_path), states=FIRST)
    assert sorted(submitted) == [1, 2]                 # rank 0 read here
    monkeypatch.setattr(parallel, "PARALLEL_MIN_BYTES", 10**12)
    assert _seen(first) == _seen(read_run(str(tmp_path), states=FIRST))
    monkeypatch.setattr(parallel, "PARALLEL_MIN_BYTES", 0)
    (tmp_path / "rank_1.jsonl").write_text("not a log\n")
    with pytest.raises(RunLogError, match=r"rank_1\.jsonl"):      # a worker's, after rank 0
        read_run(str(tmp_path), states=FIRST)
    (tmp_path / "rank_0.jsonl").write_text("not a log either\n")
    with pytest.raises(RunLogError, match=r"rank_0\.jsonl"):      # this process's, first
        read_run(str(tmp_path), states=FIRST)
