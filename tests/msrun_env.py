"""What a test that starts ranks with msrun gives them: this interpreter, a clean rank
environment, a free port; and the check that the ranks ran the MindSpore under test."""
import importlib.metadata
import os
import socket
import sys

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
