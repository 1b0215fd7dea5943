"""The settings table of docs/api.md, rendered from ``MonitorSettings`` itself.

Each setting is documented once, in its field (``setting(default, doc, unit)`` in
``settings.py``); the Markdown table is generated from those fields and pasted between two
marker comments. Regenerate it after adding or changing a setting::

    python -m mindwatch.report.settings_table --write docs/api.md     # or: make docs

``--check docs/api.md`` exits 1 when the file's table is out of date (for CI).
"""
from __future__ import annotations

import argparse
import dataclasses
import sys

from ..settings import MonitorSettings

START_MARKER = ("<!-- settings-table:start (generated from src/mindwatch/settings.py by "
                "`make docs`; do not edit by hand) -->")
END_MARKER = "<!-- settings-table:end -->"
REGENERATE = "python -m mindwatch.report.settings_table --write docs/api.md   (or: make docs)"


def documented_fields(cls: type[MonitorSettings] = MonitorSettings) -> list[dataclasses.Field]:
    """The settings a user can pass: the dataclass's init fields, in declaration order."""
    return [f for f in dataclasses.fields(cls) if f.init]


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def render_table(cls: type[MonitorSettings] = MonitorSettings) -> str:
    """One Markdown row per setting: name, default (a Python literal), unit ("-" for none),
    meaning. Raises ``ValueError`` for a setting without documentation."""
    rows = ["| setting | default | unit | meaning |", "|---|---|---|---|"]
    for f in documented_fields(cls):
        doc = f.metadata.get("doc")
        if not doc or not str(doc).strip():
            raise ValueError(f"setting {f.name!r} has no documentation: declare it with "
                             "setting(default, doc, unit) in mindwatch/settings.py")
        unit = f.metadata.get("unit") or "-"
        rows.append(f"| `{f.name}` | `{f.default!r}` | {_cell(unit)} | {_cell(doc)} |")
    return "\n".join(rows) + "\n"


def _span(text: str) -> tuple[int, int]:
    start = text.find(START_MARKER)
    end = text.find(END_MARKER)
    if start < 0 or end < start:
        raise ValueError(f"no settings table markers: the file needs a line {START_MARKER!r} "
                         f"and, after it, a line {END_MARKER!r}")
    return start + len(START_MARKER), end


def table_in(text: str) -> str:
    """The table between the markers of ``text`` (without the blank lines around it)."""
    start, end = _span(text)
    return text[start:end].strip("\n") + "\n"


def replace_table(text: str, table: str | None = None) -> str:
    """``text`` with the part between the markers replaced by ``table`` (default: rendered)."""
    start, end = _span(text)
    table = render_table() if table is None else table
    return text[:start] + "\n\n" + table + "\n" + text[end:]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m mindwatch.report.settings_table",
        description="Print the Markdown table of every MonitorSettings field, or update it "
                    "in place between the settings-table markers of a file.")
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--write", metavar="FILE", help="replace FILE's table in place")
    group.add_argument("--check", metavar="FILE",
                       help="exit 1 when FILE's table differs from the rendered one")
    args = parser.parse_args(argv)
    path = args.write or args.check
    if path is None:
        sys.stdout.write(render_table())
        return 0
    try:
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
        updated = replace_table(text)
    except (OSError, ValueError) as exc:
        print(f"{parser.prog}: {path}: {exc}", file=sys.stderr)
        return 2
    if args.check:
        if updated != text:
            print(f"{path}: the settings table is out of date; regenerate it: {REGENERATE}",
                  file=sys.stderr)
            return 1
        return 0
    if updated != text:
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(updated)
        print(f"{path}: settings table updated")
    return 0


if __name__ == "__main__":
    sys.exit(main())
