"""What a test that starts ranks with msrun gives them: this interpreter, a clean rank
environment, a free port; and the check that the ranks ran the MindSpore under test."""
import importlib.metadata
import os
import signal
import socket
import subprocess
import sys
import time

# Set by an enclosing msrun or a developer's shell; each test's job sets its own.
_RANK_VARIABLES = ("RANK_ID", "RANK_SIZE", "DEVICE_ID", "MS_WORKER_NUM", "MS_NODE_ID")


def msrun_environment(**env):
    """``os.environ`` with ``env``, for msrun. msrun starts its workers with the ``python``
    first on PATH: this interpreter's folder goes first, so under ``make test-compat`` the
    ranks run the pair's venv, not whichever ``python`` the shell would find."""
    environment = dict(os.environ, **env)
    environment["PATH"] = os.path.dirname(sys.executable) + os.pathsep + environment["PATH"]
    for name in _RANK_VARIABLES:
        environment.pop(name, None)
    return environment


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def assert_ranks_ran_this_mindspore(run, *, mindformers=False):
    """Every rank's run record names this interpreter's MindSpore (and MindFormers, read
    from its installed metadata: importing it here would cost the test seconds)."""
    import mindspore
    expected = {"mindspore": mindspore.__version__}
    if mindformers:
        expected["mindformers"] = importlib.metadata.version("mindformers")
    for log in run.ranks:
        versions = log.run["versions"]
        assert {key: versions.get(key) for key in expected} == expected, (log.rank, versions)


def msrun_until_its_ranks_end(command, *, ranks=2, cwd, env, timeout):
    """``subprocess.run(command)`` for an msrun job whose ranks fail, ended (SIGTERM to msrun,
    its scheduler and what else is in its process group) once its ``ranks`` worker processes
    (``MS_ROLE=MS_WORKER``, each in a session of its own) have exited: msrun's scheduler would
    wait MS_NODE_TIMEOUT seconds more for their heartbeats (10-15 s a job on this host). The
    status is then -SIGTERM; what the ranks did is in their logs."""
    import psutil
    process = subprocess.Popen(command, cwd=cwd, env=env, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, start_new_session=True)
    seen, deadline = set(), time.monotonic() + timeout
    try:
        while True:
            try:
                out, err = process.communicate(timeout=0.5)
                return subprocess.CompletedProcess(command, process.returncode, out, err)
            except subprocess.TimeoutExpired:
                if time.monotonic() > deadline:
                    raise
            alive = set()
            try:
                children = psutil.Process(process.pid).children(recursive=True)
            except psutil.Error:               # msrun ended meanwhile: communicate says so
                continue
            for child in children:
                try:
                    if child.environ().get("MS_ROLE") == "MS_WORKER":
                        alive.add(child.pid)
                except psutil.Error:           # gone meanwhile
                    pass
            seen |= alive
            if len(seen) >= ranks and not alive:
                os.killpg(process.pid, signal.SIGTERM)
                out, err = process.communicate(timeout=60)
                return subprocess.CompletedProcess(command, process.returncode, out, err)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.communicate()
