"""Ascend NPU state through Huawei's ``npu-smi`` command-line tool.

The probe runs beside training, so it must never raise, never block much longer than its
timeout (and not at all past ``interrupt``, which kills the tool), and never flood the log: each
distinct problem is queued once for the caller to log (``pop_new_messages``), and a tool that
is plainly absent stops being called. A device seen once stays in every later sample, with
null values while the tool does not report it: a vanished reading is unknown, not gone.
"""
from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
from collections.abc import Callable, Mapping, Sequence

from ..basics.once import OnceMessages
from ..basics.rank import LOCAL_RANK_VARS, env_int, parse_index
from ..observation import DeviceSample
from .npu_smi_parse import parse_info, parse_mapping, parse_processes, to_device_samples

# a missing tool may still appear (a driver install finishing); a few tries cost little
MAX_MISSING_TRIES = 3


def visible_devices_from_env(env: Mapping[str, str] | None = None) -> list[int] | None:
    """Logic ids of the NPUs this rank uses, or ``None`` for "no hint: all of them".

    Precedence: ``ASCEND_RT_VISIBLE_DEVICES`` (comma list of logic ids) narrows what the
    process can see, and the runtime renumbers those from 0, so ``DEVICE_ID`` - or, without
    it, the local rank (``LOCAL_RANK``, ``OMPI_COMM_WORLD_LOCAL_RANK``, ``MS_LOCAL_RANK``) -
    picks one entry of that list. An id that is past the list's end but in it is taken as
    already absolute (launchers that set both to the same physical id); otherwise the whole
    list is returned. Without the list, ``DEVICE_ID``, then the local rank, is the logic id.
    """
    env = os.environ if env is None else env
    visible: list[int] | None = None
    raw = (env.get("ASCEND_RT_VISIBLE_DEVICES") or "").strip()
    if raw:
        parts = raw.split(",")
        numbers = [n for n in map(parse_index, parts) if n is not None]
        if len(numbers) == len(parts):
            visible = numbers
    chosen = env_int(env, "DEVICE_ID", *LOCAL_RANK_VARS)
    if visible is None:
        return None if chosen is None else [chosen]
    if chosen is not None and chosen < len(visible):
        return [visible[chosen]]
    if chosen is not None and chosen in visible:
        return [chosen]
    return visible


class NpuSmiProbe:
    """``sample()`` returns one ``DeviceSample`` per NPU chip (index = logic id), never raises.

    ``devices``: logic ids to keep (``None``: all). ``own_pids``: this job's processes on the
    NPUs (default: this one); a chip one of them runs on lists the other processes on it
    (``DeviceSample.others``). ``runner``: stands in for ``subprocess.run`` (same call), for
    tests. ``last_error`` is the problem of the latest
    call (``None`` when it was clean); ``disabled_reason`` says why ``enabled`` went False.
    ``interrupt()`` (from any thread) kills a call in progress and turns the probe off.
    """

    def __init__(self, *, devices: Sequence[int] | None = None,
                 executable: str = "npu-smi", timeout_s: float = 2.0,
                 runner: Callable | None = None, own_pids: Sequence[int] | None = None):
        self.devices = None if devices is None else {int(d) for d in devices}
        self.own_pids = frozenset([os.getpid()] if own_pids is None else own_pids)
        self.executable = executable
        self.timeout_s = float(timeout_s)
        self.enabled = True
        self.disabled_reason: str | None = None
        self.last_error: str | None = None
        self._runner = runner or self._run_child
        self._mapping: dict[tuple[int, int], int] | None = None
        self._mapping_tries = 0
        self._missing = 0
        self._failed = False                   # the latest call exited non-zero
        self._known: dict[int, None] = {}      # logic ids sampled before, in first-seen order
        self._messages = OnceMessages()
        self._closed = False
        self._child: subprocess.Popen | None = None
        self._guard = threading.Lock()         # _child and _closed, shared with interrupt()

    def pop_new_messages(self) -> list[str]:
        """Problems not handed out before, each distinct text once per probe."""
        return self._messages.pop()

    def _report(self, message: str, key: object = None) -> None:
        self.last_error = message
        self._messages.report(key or message, message)

    def interrupt(self) -> None:
        """Turn the probe off for good and kill the tool if it is running now, so a hung
        ``npu-smi`` never holds up the end of training. Idempotent, any thread."""
        with self._guard:
            self._closed = True
            child = self._child
        if child is not None:
            _kill(child)

    close = interrupt       # nothing else to release

    def _run_child(self, argv: list[str], *, timeout: float, **_: object
                   ) -> subprocess.CompletedProcess:
        # A session of its own, so that killing its process group also ends whatever a
        # wrapper script started; undecodable bytes are replaced, since garbage must still
        # reach the parser (which finds no table in it) rather than raise here.
        with subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, encoding="utf-8", errors="replace",
                              start_new_session=True) as child:
            with self._guard:
                self._child = child
                closed = self._closed
            try:
                if closed:
                    _kill(child)
                stdout, stderr = child.communicate(timeout=timeout)
            except subprocess.TimeoutExpired:
                _kill(child)
                raise
            finally:
                with self._guard:
                    self._child = None
        return subprocess.CompletedProcess(argv, child.returncode, stdout, stderr)

    def _run(self, *args: str) -> str | None:
        """The tool's stdout, or None when there is none worth parsing."""
        argv = [self.executable, *args]
        shown = " ".join(argv)
        try:
            done = self._runner(argv, timeout=self.timeout_s, capture_output=True, text=True)
        except OSError as exc:      # absent, no x bit, not a program (ENOEXEC), ...
            self._missing += 1
            self._report(f"{self.executable} cannot be run ({exc.__class__.__name__}: "
                         f"{exc.strerror or exc}); NPU samples are empty, and NPU sampling "
                         f"is off after {MAX_MISSING_TRIES} failures in a row",
                         key=("cannot run", exc.__class__.__name__))
            if self._missing >= MAX_MISSING_TRIES:
                self.enabled = False
                self.disabled_reason = (f"{self.executable} could not be run "
                                        f"{self._missing} times in a row; NPU sampling is off")
            return None
        except subprocess.TimeoutExpired:
            if not self._closed:
                self._report(f"'{shown}' gave no answer within {self.timeout_s:g} s; "
                             f"NPU samples are null while it hangs")
            return None
        except Exception as exc:  # the runner is pluggable; nothing may escape sample()
            self._report(f"'{shown}' failed: {exc.__class__.__name__}: {exc}",
                         key=f"{shown} raised {exc.__class__.__name__}")
            return None
        if self._closed:            # killed by interrupt(): its output is cut short
            return None
        self._missing = 0
        stdout = getattr(done, "stdout", None)
        stdout = stdout if isinstance(stdout, str) else ""
        code = getattr(done, "returncode", 0)
        self._failed = code != 0
        if code != 0:
            # the table may still be there (one card in trouble): report and parse anyway
            stderr = getattr(done, "stderr", None)
            lines = (stderr if isinstance(stderr, str) else "").strip().splitlines()
            detail = f": {lines[0][:200]}" if lines else ""
            self._report(f"'{shown}' exited with status {code}{detail}",
                         key=f"{shown} exit {code}")
        return stdout

    def _logic_ids(self) -> dict[tuple[int, int], int]:
        # The card/chip -> logic id mapping is fixed while the machine runs: ask once it has
        # answered. A call that got no answer (a hang) is retried a few times, since going on
        # with positions for ids could credit this rank with another rank's chip.
        if self._mapping is not None:
            return self._mapping
        self._mapping_tries += 1
        text = self._run("info", "-m")
        mapping = {(m.npu_id, m.chip_id): m.logic_id for m in parse_mapping(text or "")}
        if text is not None or self._mapping_tries >= MAX_MISSING_TRIES:
            self._mapping = mapping
        return mapping

    def _with_known(self, samples: list[DeviceSample], *, answered: bool = False
                    ) -> list[DeviceSample]:
        """``samples`` plus a null sample for each device seen before and missing now, said
        once per device when the tool ``answered`` without it (a failed call is said as
        such)."""
        present = {s.index for s in samples}
        missing = [index for index in self._known if index not in present]
        for index in missing if answered else ():
            self._report(f"NPU {index} is no longer in '{self.executable} info' (it was "
                         "before); its values are null while it is missing",
                         key=("missing", index))
        for index in present:
            self._known.setdefault(index)
        return samples + [DeviceSample("npu", index) for index in missing]

    def sample(self) -> list[DeviceSample]:
        if not self.enabled or self._closed:
            return []
        try:
            self.last_error = None
            text = self._run("info")
            if text is None:
                return self._with_known([])
            chips = parse_info(text)
            if not chips and self._failed:
                return self._with_known([])     # its exit status was said: one problem
            if not chips:
                first = next((ln.strip() for ln in text.splitlines() if ln.strip()), "")
                self._report(f"'{self.executable} info' printed no NPU table"
                             + (f" (first line: {first[:120]!r})" if first else " (empty)"),
                             key="no table")
                return self._with_known([])
            samples = to_device_samples(chips, self._logic_ids(), parse_processes(text),
                                        self.own_pids)
            if self.devices is not None:
                samples = [s for s in samples if s.index in self.devices]
            return [] if self._closed else self._with_known(samples, answered=True)
        except Exception as exc:  # see _run
            self._report(f"NPU sampling failed: {exc.__class__.__name__}: {exc}",
                         key=f"sample raised {exc.__class__.__name__}")
            return self._with_known([])


def _kill(child: subprocess.Popen) -> None:
    if child.returncode is None:      # not reaped yet, so its pid is still its own
        with contextlib.suppress(OSError):
            os.killpg(child.pid, signal.SIGKILL)
        with contextlib.suppress(OSError):
            child.kill()
