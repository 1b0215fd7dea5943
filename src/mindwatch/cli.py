"""The ``mindwatch`` command. Errors are one readable line on stderr, never a traceback.

Commands: ``demo``, ``summary``, ``report``, ``watch`` (see docs/cli.md). Each handler takes
the parsed arguments, checks every option before doing any work (``demo`` before importing
MindSpore), and returns the exit code; a problem the user can fix is raised as ``CliError``
(message and exit code), which ``main`` prints as ``mindwatch <command>: <message>``.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import sys
from typing import NoReturn

EXIT_UNREADABLE = 2
# mindwatch.mindspore.demo.inject.KINDS, which cannot be imported without MindSpore.
INJECT_KINDS = ("explode", "nan", "diverge", "vanish", "spike")
# mindwatch.policy.POLICIES (importable, but listed here beside the kinds for --help).
DEMO_POLICIES = ("warn", "stop", "checkpoint_and_stop", "skip", "rewind")
# Bounds that keep a typo from becoming hours of work or gigabytes of memory: the demo draws
# all its data up front (16 x 48 tokens a step), MindSpore seeds are 32-bit.
MAX_DEMO_STEPS = 100_000
MAX_SEED = 2**32 - 1
MAX_POINTS = 1_000_000
MAX_REFRESH_S = 3600
MAX_WAIT_S = 86400
# The page of several runs, by default in the current directory: not report.html, which
# would overwrite the report of the run whose directory that may be.
COMPARE_OUTPUT = "compare.html"
# `mindwatch demo` where MindSpore is missing (a PyTorch environment, say): what to install,
# the one command that sets it all up in a checkout, and the PyTorch user's own first run.
DEMO_NEEDS_MINDSPORE = (
    "the demo trains with MindSpore, which cannot be imported here ({}): install it with "
    "pip install 'mindwatch[mindspore]' (MindSpore 2.7 to 2.10, numpy<2), or in mindwatch's "
    "checkout run make demo, which creates .venv with MindSpore and runs the demo; with "
    "PyTorch, the script in docs/torch.md#a-first-run-on-the-cpu is a first run on the CPU")


class CliError(Exception):
    """A problem to report in one line, with the exit code to use."""

    def __init__(self, message: str, code: int = EXIT_UNREADABLE):
        super().__init__(message)
        self.code = code


def _one_line(text: str) -> str:
    """Control characters (a newline in a path) escaped, so an error stays one line."""
    return re.sub(r"[\x00-\x1f\x7f]", lambda m: repr(m.group())[1:-1], text)


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        # argparse prints the usage too; one line is what every other error promises.
        self.exit(EXIT_UNREADABLE, f"{self.prog}: {_one_line(message)} "
                                   f"(see {self.prog} --help)\n")


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="mindwatch", description="Watch training runs.")
    commands = parser.add_subparsers(dest="command", required=True)

    demo = commands.add_parser("demo", help="train a small Transformer LM under full monitoring")
    demo.add_argument("--out", help="run directory (default: runs/demo-<time>)")
    demo.add_argument("--steps", type=int, default=300,
                      help=f"training steps, 1 to {MAX_DEMO_STEPS} (default 300)")
    demo.add_argument("--inject", metavar="KIND@STEP",
                      help="provoke a fault: explode, nan, diverge, vanish or spike, at STEP")
    demo.add_argument("--policy", help="on_anomaly for every kind: " + ", ".join(DEMO_POLICIES)
                      + " (default: checkpoint_and_stop for non-finite values, explosion "
                      "and overheat, warn for the rest)")
    demo.add_argument("--seed", type=int, default=0, help=f"0 to {MAX_SEED} (default 0)")

    summary = commands.add_parser("summary", help="verdict of a run; exit 0 healthy, 1 anything "
                                  "else, 2 unreadable")
    summary.add_argument("run_dir", metavar="RUN_DIR")
    summary.add_argument("--json", action="store_true", help="print JSON instead of text")

    report = commands.add_parser("report", help="one self-contained HTML file with every curve "
                                 "and anomaly of a run, or of several runs to compare")
    report.add_argument("run_dirs", metavar="RUN_DIR", nargs="+",
                        help="a run directory; several are drawn over each other")
    report.add_argument("-o", "--output", metavar="FILE",
                        help="where to write the HTML (default: RUN_DIR/report.html; with "
                        f"several RUN_DIRs {COMPARE_OUTPUT} in the current directory)")
    report.add_argument("--png", metavar="DIR", help="also write the main panels as PNG images")
    report.add_argument("--max-points", type=int, default=2000, metavar="N",
                        help=f"points kept per curve, 10 to {MAX_POINTS}; spikes and anomalies "
                        "are always kept (default 2000)")

    watch = commands.add_parser("watch", help="a live terminal view that follows the run logs")
    watch.add_argument("run_dir", metavar="RUN_DIR")
    watch.add_argument("--refresh", type=float, default=0.5, metavar="S",
                       help="seconds between updates (default 0.5)")
    watch.add_argument("--wait", type=float, default=0.0, metavar="S",
                       help="seconds to wait for the run logs to appear (default 0: exit 2 "
                       "at once when there are none)")
    return parser


def _in_range(option: str, value: float, low: float, high: float, unit: str = "") -> None:
    if not low <= value <= high:            # NaN fails both comparisons
        raise CliError(f"{option} must be at least {low} and at most {high}{unit}; got {value}")


def _stat(option: str, path: str) -> os.stat_result | None:
    """``os.stat(path)``, None when nothing is there; other failures are the option's error."""
    if not path or "\0" in path:
        raise CliError(f"{option} must be a path; got {path!r}")
    try:
        return os.stat(path)
    except FileNotFoundError:
        return None
    except OSError as exc:                  # a name too long, a file used as a directory
        raise CliError(f"{option} {path}: {exc.strerror or exc}") from exc
    except ValueError as exc:               # a name the file system cannot encode
        raise CliError(f"{option} {path!r}: not a valid path ({exc})") from exc


def _creatable(option: str, path: str) -> None:
    """``path`` does not exist; its nearest existing ancestor must be a directory."""
    parent = os.path.dirname(os.path.abspath(path))
    while _stat(option, parent) is None:
        parent = os.path.dirname(parent)
    if not os.path.isdir(parent):
        raise CliError(f"{option} {path}: cannot be created, {parent} is not a directory")


def _existing_dir(option: str, path: str) -> None:
    found = _stat(option, path)
    if found is None:
        raise CliError(f"{option} {path}: no such run directory")
    if not os.path.isdir(path):
        raise CliError(f"{option} {path}: not a directory")


def _new_dir(option: str, path: str) -> None:
    """A directory that exists or can be made."""
    if _stat(option, path) is None:
        _creatable(option, path)
    elif not os.path.isdir(path):
        raise CliError(f"{option} {path}: exists and is not a directory")


def _summary(args: argparse.Namespace) -> int:
    """``mindwatch summary RUN_DIR [--json]``: the verdict of a run, on stdout.

    Reads every ``rank_<R>.jsonl`` of ``args.run_dir`` and prints the verdict, then per rank
    the steps, how the run ended, first loss and last smoothed loss, withheld updates, lines
    that could not be read, and each anomaly (``--json``: the same as one JSON object, with
    ``exit_code``). Returns 0 when healthy (every rank ended ``completed``, no anomaly), 1
    otherwise. Raises ``CliError`` (exit 2) when the directory or a log cannot be read.

    Example: ``mindwatch summary runs/exp1 --json``
    """
    _existing_dir("RUN_DIR", args.run_dir)
    from .report.summary import render, summarize_dir
    from .runlog import RunLogError
    try:
        result = summarize_dir(args.run_dir)
    except RunLogError as exc:
        raise CliError(str(exc)) from exc
    print(json.dumps(result, indent=2, default=str) if args.json else render(result))
    return result["exit_code"]


def _run_dirs(paths: list[str]) -> None:
    """Each is a directory, and none is given twice (under another name, too: ``runs/a`` and
    ``./runs/a/`` would be one run drawn over itself)."""
    seen: dict[tuple[int, int], str] = {}
    for path in paths:
        _existing_dir("RUN_DIR", path)
        found = os.stat(path)
        first = seen.setdefault((found.st_dev, found.st_ino), path)
        if first is not path:
            raise CliError(f"RUN_DIR {path}: given twice (it is the directory {first})")


def _report(args: argparse.Namespace) -> int:
    """``mindwatch report RUN_DIR [RUN_DIR ...] [-o FILE] [--png DIR] [--max-points N]``.

    Writes a self-contained HTML page (every curve of every rank, anomalies marked and listed;
    opens offline) to ``args.output`` and prints its path; with several run directories their
    curves are drawn over each other, each named after its run, under a table of the runs.
    Default output: ``RUN_DIR/report.html`` for one run, ``compare.html`` in the current
    directory for several. ``--png DIR`` also writes the main panels as PNG images (needs
    Pillow), one path per line. Returns 0. Raises ``CliError`` (exit 2) for a bad option, a
    run directory that is not one, or is given twice, an unreadable log, an unwritable
    output, or ``--png`` without Pillow.

    Example: ``mindwatch report runs/lr1e-3 runs/lr3e-4 -o lr.html``
    """
    _in_range("--max-points", args.max_points, 10, MAX_POINTS)
    dirs = args.run_dirs
    _run_dirs(dirs)
    output = args.output
    if output is None:
        output = os.path.join(dirs[0], "report.html") if len(dirs) == 1 else COMPARE_OUTPUT
    if _stat("-o/--output", output) is None:
        if not os.path.isdir(os.path.dirname(os.path.abspath(output))):
            raise CliError(f"-o/--output {output}: cannot write there, its directory does not "
                           "exist")
    elif os.path.isdir(output):
        raise CliError(f"-o/--output {output}: is a directory")
    if args.png is not None:
        _new_dir("--png", args.png)
        try:
            import PIL.Image  # noqa: F401
        except ImportError as exc:
            raise CliError(f"--png needs Pillow ({exc}); pip install 'mindwatch[report]' "
                           "(or: pip install pillow)") from exc
    from .basics.run_dir import rank_logs
    # Before any run is read (seconds for a long one): a later RUN_DIR without logs fails now.
    for path in dirs:
        if not rank_logs(path):
            raise CliError(f"RUN_DIR {path}: no rank_<R>.jsonl run logs found; is this a "
                           "mindwatch log_dir?")
    from .runlog import FIRST, NONE, RunLogError, read_run
    if len(dirs) == 1 and args.png is None:
        # a job's page reads job.jsonl and the ranks it names, never every rank's log
        from .report.run_page import write_run_report
        try:
            print(write_run_report(dirs[0], output, max_points=args.max_points))
        except RunLogError as exc:
            raise CliError(str(exc)) from exc
        except OSError as exc:
            raise CliError(f"-o/--output: cannot write {output}: {exc.strerror or exc}"
                           ) from exc
        return 0
    from .report.compare import write_compare, write_compare_pngs
    from .report.html import write_html
    from .report.png import write_pngs
    from .report.runs import run_labels
    try:
        # a run's page draws the first rank's state records; the comparison page none
        runs = [read_run(path, states=FIRST if len(dirs) == 1 else NONE) for path in dirs]
    except RunLogError as exc:
        raise CliError(str(exc)) from exc
    labels = run_labels(dirs)
    try:
        if len(runs) == 1:
            write_html(runs[0], output, max_points=args.max_points)
        else:
            write_compare(runs, labels, output, max_points=args.max_points)
    except OSError as exc:
        raise CliError(f"-o/--output: cannot write {output}: {exc.strerror or exc}") from exc
    print(output)
    if args.png is not None:
        try:
            paths = write_pngs(runs[0], args.png) if len(runs) == 1 else \
                write_compare_pngs(runs, labels, args.png)
        except OSError as exc:
            raise CliError(f"--png: cannot write PNGs to {args.png}: {exc.strerror or exc}"
                           ) from exc
        print("\n".join(paths))
    return 0


def _watch(args: argparse.Namespace) -> int:
    """``mindwatch watch RUN_DIR [--refresh S] [--wait S]``: a live terminal view of a run.

    Follows every ``rank_<R>.jsonl`` of ``args.run_dir`` as it grows, redrawing every
    ``--refresh`` seconds. Returns 0 once every rank has written its ``end`` record, 130 on
    Ctrl-C; the last view stays on screen. Raises ``CliError`` (exit 2) for a bad option,
    a missing ``rich`` package, a file that is not a run log, or no run log in ``RUN_DIR``
    within ``--wait`` seconds (default 0: at once).

    Example: ``mindwatch watch runs/exp1 --refresh 2``
    """
    if not 0 < args.refresh <= MAX_REFRESH_S:
        raise CliError(f"--refresh must be > 0 and <= {MAX_REFRESH_S} seconds; "
                       f"got {args.refresh}")
    _in_range("--wait", args.wait, 0, MAX_WAIT_S, " seconds")
    if _stat("RUN_DIR", args.run_dir) is not None and not os.path.isdir(args.run_dir):
        raise CliError(f"RUN_DIR {args.run_dir}: not a directory")
    try:
        from .report.watch import NoRunLogs, watch
    except ImportError as exc:
        raise CliError(f"watch needs rich ({exc}); pip install 'rich>=13'") from exc
    from .runlog import RunLogError
    try:
        return watch(args.run_dir, refresh_s=args.refresh, wait_s=args.wait)
    except NoRunLogs as exc:
        raise CliError(f"RUN_DIR {exc}") from exc
    except RunLogError as exc:
        raise CliError(str(exc)) from exc


def _inject_step(text: str, steps: int) -> None:
    kind, sep, step = text.partition("@")
    if not sep or kind not in INJECT_KINDS or not (step.isascii() and step.isdigit()) \
            or int(step) < 1:
        raise CliError(f"--inject must be KIND@STEP with KIND one of {', '.join(INJECT_KINDS)}"
                       f" and STEP a positive step number, e.g. explode@50; got {text!r}")
    if int(step) > steps:
        raise CliError(f"--inject step {int(step)} is beyond --steps {steps}: the fault would "
                       "never happen")


def _demo(args: argparse.Namespace) -> int:
    """``mindwatch demo [--out DIR] [--steps N] [--inject KIND@STEP] [--seed N] [--policy P]``.

    Trains a small Transformer language model on the CPU (GRAPH_MODE) for one epoch of
    ``--steps`` steps under ``TrainMonitor`` with ``wrap(per_layer_norms=True)``, then writes
    ``report.html`` into the run directory and prints both paths. ``--inject`` provokes a fault
    (``explode``, ``nan``, ``diverge``, ``vanish`` or ``spike``) at that step; ``--policy``
    sets ``on_anomaly`` for every kind (``skip``: the run withholds the bad update and goes
    on). Returns 0 once training
    succeeded, anomalies or not (``mindwatch summary`` gives the verdict), even when the report
    cannot be written (that is said in one line on stderr). Raises ``CliError`` (exit 2) for a
    bad option (checked before MindSpore is imported) or a missing MindSpore.

    Example: ``mindwatch demo --steps 200 --inject explode@50``
    """
    _in_range("--steps", args.steps, 1, MAX_DEMO_STEPS)
    _in_range("--seed", args.seed, 0, MAX_SEED)
    if args.inject is not None:
        _inject_step(args.inject, args.steps)
    if args.policy is not None and args.policy not in DEMO_POLICIES:
        raise CliError(f"--policy must be one of {', '.join(DEMO_POLICIES)}; got "
                       f"{args.policy!r}")
    if args.out is not None:
        _new_dir("--out", args.out)
        log = os.path.join(args.out, "rank_0.jsonl")
        if os.path.isfile(log) and os.path.getsize(log) > 0:
            raise CliError(f"--out {args.out}: already holds a run log; choose a new directory")
    try:
        from .mindspore.demo.run import parse_inject, run_demo
    except ImportError as exc:
        raise CliError(DEMO_NEEDS_MINDSPORE.format(exc)) from exc
    inject = parse_inject(args.inject) if args.inject else None
    result = run_demo(out=args.out, steps=args.steps, inject=inject, seed=args.seed,
                      policy=args.policy)
    print(f"run directory: {result.run_dir}")
    from .report.html import write_html
    from .runlog import FIRST, RunLogError, read_run
    report = os.path.join(result.run_dir, "report.html")
    try:
        write_html(read_run(result.run_dir, states=FIRST), report)
    except (OSError, RunLogError) as exc:
        # Training succeeded: its log, checkpoints and anomaly reports are there. The page
        # can be made later with `mindwatch report`, so this is no failure of the demo.
        why = f"{exc.strerror or exc}" if isinstance(exc, OSError) else str(exc)
        print(_one_line(f"mindwatch demo: training finished, but the report could not be "
                        f"written to {report}: {why}"), file=sys.stderr)
        return 0
    print(f"report: {report}")
    return 0


def main(argv: list[str] | None = None) -> int:
    """Run the ``mindwatch`` command line with ``argv`` (default ``sys.argv[1:]``).

    Returns the command's exit code: ``summary`` 0 healthy, 1 anything else readable, 2
    unreadable input; ``report`` and ``demo`` 0; ``watch`` 0 once every rank ended. Any error
    is one line on stderr, ``mindwatch <command>: <message>``, never a traceback: exit 2 (or
    the code the error carries), 130 on Ctrl-C. Usage errors (an unknown option, a value of
    the wrong type) are one line too, exit 2, raised as ``SystemExit`` as argparse does (and
    ``--help``, exit 0).

    Example: ``mindwatch summary runs/exp1 --json``
    """
    args = _parser().parse_args(argv)
    try:
        handler = {"demo": _demo, "summary": _summary, "report": _report,
                   "watch": _watch}[args.command]
        return handler(args)
    except CliError as exc:
        print(_one_line(f"mindwatch {args.command}: {exc}"), file=sys.stderr)
        return exc.code
    except KeyboardInterrupt:
        print(f"mindwatch {args.command}: interrupted", file=sys.stderr)
        return 130
    except ModuleNotFoundError as exc:
        if exc.name != "numpy":
            print(_one_line(f"mindwatch {args.command}: {type(exc).__name__}: {exc}"),
                  file=sys.stderr)
            return EXIT_UNREADABLE
        # a job of several ranks is read into arrays (runlog/job/); one rank's log is not
        print(f"mindwatch {args.command}: the views of a job of several ranks need numpy, "
              "which cannot be imported here: pip install numpy (MindSpore and PyTorch "
              "install it)", file=sys.stderr)
        return EXIT_UNREADABLE
    except BrokenPipeError:
        # the reader went away (``mindwatch summary DIR | head``): quiet, as a program killed
        # by SIGPIPE is, and stdout pointed at /dev/null so the exit's flush says nothing
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 128 + 13
    except Exception as exc:  # documented in docs/cli.md: one line, never a traceback
        print(_one_line(f"mindwatch {args.command}: {type(exc).__name__}: {exc}"),
              file=sys.stderr)
        return EXIT_UNREADABLE


if __name__ == "__main__":
    sys.exit(main())
