"""The ``mindwatch`` command. Errors are one readable line on stderr, never a traceback.

Commands: ``demo``, ``summary``, ``report``, ``watch`` (see docs/cli.md). Each handler takes
the parsed arguments and returns the exit code; a problem the user can fix is raised as
``CliError`` (message and exit code), which ``main`` prints as ``mindwatch <command>: <message>``.
"""
from __future__ import annotations

import argparse
import json
import os
import sys

EXIT_UNREADABLE = 2


class CliError(Exception):
    """A problem to report in one line, with the exit code to use."""

    def __init__(self, message: str, code: int = EXIT_UNREADABLE):
        super().__init__(message)
        self.code = code


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="mindwatch", description="Watch training runs.")
    commands = parser.add_subparsers(dest="command", required=True)

    demo = commands.add_parser("demo", help="train a small Transformer LM under full monitoring")
    demo.add_argument("--out", help="run directory (default: runs/demo-<time>)")
    demo.add_argument("--steps", type=int, default=300, help="training steps (default 300)")
    demo.add_argument("--inject", metavar="KIND@STEP",
                      help="provoke a fault: explode, nan, diverge or vanish, at STEP")
    demo.add_argument("--seed", type=int, default=0)

    summary = commands.add_parser("summary", help="verdict of a run; exit 0 healthy, 1 anomalies, "
                                  "2 unreadable")
    summary.add_argument("run_dir")
    summary.add_argument("--json", action="store_true", help="print JSON instead of text")

    report = commands.add_parser("report", help="one self-contained HTML file with every curve "
                                 "and anomaly of a run")
    report.add_argument("run_dir")
    report.add_argument("-o", "--output", metavar="FILE",
                        help="where to write the HTML (default: RUN_DIR/report.html)")
    report.add_argument("--png", metavar="DIR", help="also write the main panels as PNG images")
    report.add_argument("--max-points", type=int, default=2000, metavar="N",
                        help="points kept per curve; spikes and anomalies are always kept "
                        "(default 2000)")

    watch = commands.add_parser("watch", help="a live terminal view that follows the run logs")
    watch.add_argument("run_dir")
    watch.add_argument("--refresh", type=float, default=0.5, metavar="S",
                       help="seconds between updates (default 0.5)")
    return parser


def _summary(args: argparse.Namespace) -> int:
    """``mindwatch summary RUN_DIR [--json]``: the verdict of a run, on stdout.

    Reads every ``rank_<R>.jsonl`` of ``args.run_dir`` and prints, per rank, the steps, how the
    run ended, first loss and last smoothed loss, withheld updates and each anomaly (``--json``:
    the same as one JSON object, with ``exit_code``). Returns 0 when healthy (no anomaly
    record and no rank ended with ``error``), 1 otherwise. Raises ``CliError`` (exit 2) when the
    directory or a log cannot be read.

    Example: ``mindwatch summary runs/exp1 --json``
    """
    from .report.summary import render_text, summarize
    from .runlog import RunLogError, read_run
    try:
        result = summarize(read_run(args.run_dir))
    except RunLogError as exc:
        raise CliError(str(exc)) from exc
    print(json.dumps(result, indent=2, default=str) if args.json else render_text(result))
    return result["exit_code"]


def _report(args: argparse.Namespace) -> int:
    """``mindwatch report RUN_DIR [-o FILE] [--png DIR] [--max-points N]``: one HTML file.

    Writes a self-contained HTML page (every curve of every rank, anomalies marked and listed;
    opens offline) to ``args.output`` (default ``RUN_DIR/report.html``) and prints its path;
    with ``--png DIR`` also the main panels as PNG images (needs Pillow), one path per line.
    Returns 0. Raises ``CliError`` (exit 2) for ``--max-points`` below 10, an unreadable run
    directory, an unwritable output, or ``--png`` without Pillow.

    Example: ``mindwatch report runs/exp1 -o exp1.html --png runs/exp1/png``
    """
    from .report.html import write_html
    from .report.png import write_pngs
    from .runlog import RunLogError, read_run
    if args.max_points < 10:
        raise CliError(f"--max-points must be at least 10; got {args.max_points}")
    output = args.output or os.path.join(args.run_dir, "report.html")
    try:
        run = read_run(args.run_dir)
    except RunLogError as exc:
        raise CliError(str(exc)) from exc
    try:
        write_html(run, output, max_points=args.max_points)
    except OSError as exc:
        raise CliError(f"cannot write {output}: {exc.strerror or exc}") from exc
    print(output)
    if args.png:
        try:
            paths = write_pngs(run, args.png)
        except ImportError as exc:
            raise CliError(f"--png needs Pillow ({exc}); pip install 'mindwatch[report]' "
                           "(or: pip install pillow)") from exc
        except OSError as exc:
            raise CliError(f"cannot write PNGs to {args.png}: {exc.strerror or exc}") from exc
        print("\n".join(paths))
    return 0


def _watch(args: argparse.Namespace) -> int:
    """``mindwatch watch RUN_DIR [--refresh S]``: a live terminal view of a run.

    Follows every ``rank_<R>.jsonl`` of ``args.run_dir`` as it grows (waiting for the
    directory and the logs to appear), redrawing every ``--refresh`` seconds. Returns 0 once
    every rank has written its ``end`` record, 130 on Ctrl-C; the last view stays on screen.
    Raises ``CliError`` (exit 2) for ``--refresh`` <= 0, a missing ``rich`` package, or a log
    line that is not a run-log record.

    Example: ``mindwatch watch runs/exp1 --refresh 2``
    """
    if not args.refresh > 0:
        raise CliError(f"--refresh must be > 0 seconds; got {args.refresh}")
    try:
        from .report.watch import watch
    except ImportError as exc:
        raise CliError(f"watch needs rich ({exc}); pip install 'rich>=13'") from exc
    from .runlog import RunLogError
    try:
        return watch(args.run_dir, refresh_s=args.refresh)
    except RunLogError as exc:
        raise CliError(str(exc)) from exc


def _demo(args: argparse.Namespace) -> int:
    """``mindwatch demo [--out DIR] [--steps N] [--inject KIND@STEP] [--seed N]``.

    Trains a small Transformer language model on the CPU (GRAPH_MODE) for one epoch of
    ``--steps`` steps under ``TrainMonitor`` with ``wrap(per_layer_norms=True)``, then writes
    ``report.html`` into the run directory and prints both paths. ``--inject`` provokes a fault
    (``explode``, ``nan``, ``diverge`` or ``vanish``) at that step. Returns 0 whether or not
    anomalies were found (``mindwatch summary`` gives the verdict). Raises ``CliError`` (exit 2)
    for ``--steps`` < 1, a malformed ``--inject`` or a missing MindSpore.

    Example: ``mindwatch demo --steps 200 --inject explode@50``
    """
    if args.steps < 1:
        raise CliError(f"--steps must be at least 1; got {args.steps}")
    try:
        from .mindspore.demo.run import parse_inject, run_demo
    except ImportError as exc:
        raise CliError(f"the demo needs MindSpore ({exc}); pip install 'mindspore==2.10.0' "
                       "'numpy<2'") from exc
    try:
        inject = parse_inject(args.inject) if args.inject else None
    except ValueError as exc:
        raise CliError(str(exc)) from exc
    result = run_demo(out=args.out, steps=args.steps, inject=inject, seed=args.seed)
    print(f"run directory: {result.run_dir}")
    from .report.html import write_html
    from .runlog import read_run
    report = write_html(read_run(result.run_dir), os.path.join(result.run_dir, "report.html"))
    print(f"report: {report}")
    return 0


def main(argv: list[str] | None = None) -> int:
    """Run the ``mindwatch`` command line with ``argv`` (default ``sys.argv[1:]``).

    Returns the command's exit code: ``summary`` 0 healthy, 1 anomalies, 2 unreadable input;
    ``report`` and ``demo`` 0; ``watch`` 0 once every rank ended. Any error is one line on
    stderr, ``mindwatch <command>: <message>``, never a traceback: exit 2 (or the code the
    error carries), 130 on Ctrl-C. Usage errors are argparse's (usage on stderr, exit 2:
    ``SystemExit`` is raised, as argparse does, for those and for ``--help``).

    Example: ``mindwatch summary runs/exp1 --json``
    """
    args = _parser().parse_args(argv)
    try:
        handler = {"demo": _demo, "summary": _summary, "report": _report,
                   "watch": _watch}[args.command]
        return handler(args)
    except CliError as exc:
        print(f"mindwatch {args.command}: {exc}", file=sys.stderr)
        return exc.code
    except KeyboardInterrupt:
        print(f"mindwatch {args.command}: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:  # documented in docs/cli.md: one line, never a traceback
        print(f"mindwatch {args.command}: {type(exc).__name__}: {exc}", file=sys.stderr)
        return EXIT_UNREADABLE


if __name__ == "__main__":
    sys.exit(main())
