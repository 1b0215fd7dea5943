"""Other processes of the host that take its CPU, for the tests of contention: processes that
spin, none of them a child of the test (started through a shell that exits), so that a
process's own-children accounting leaves them out."""
import contextlib
import subprocess
import sys

import psutil

SPIN = "import time; end = time.time() + {seconds}\nwhile time.time() < end: pass"


def start(count: int, seconds: float) -> list[int]:
    """``count`` spinning processes that stop by themselves after ``seconds``; their pids."""
    script = SPIN.format(seconds=seconds)
    out = subprocess.run(
        ["sh", "-c", " ".join(f"({sys.executable} -c '{script}' </dev/null >/dev/null 2>&1 "
                              "& echo $!);" for _ in range(count))],
        capture_output=True, text=True, check=True, timeout=10).stdout
    return [int(pid) for pid in out.split()]


def stop(pids: list[int]) -> None:
    for pid in pids:
        with contextlib.suppress(psutil.Error):
            psutil.Process(pid).kill()
