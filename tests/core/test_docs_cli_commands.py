"""Every ``mindwatch <command>`` that README.md and docs/*.md show (code spans, tables,
shell and output blocks) is a command of the CLI, and every option written after it on that
line is one of that command's; every command the CLI has is documented in docs/cli.md."""
import re

import pytest

from docs_markdown import ROOT, blocks, code_spans, doc_files, rel
from mindwatch.cli import _parser

# A command where a shell runs one: at the start of the span or line (after a prompt, or a
# path: .venv/bin/mindwatch), or after |, ;, && or $( -- "mindwatch summary runs/exp1"; not
# "pip install mindwatch torch", "# any mindwatch setting", "mindwatch.torch", "mindwatch:"
COMMAND = re.compile(r"(?:^|[|;&(]\s*|^\$\s+)(?:[\w./-]*/)?mindwatch[ \t]+([a-z][\w-]*)(.*)",
                     re.M)
# where the command's own arguments end on a shell line
SHELL_END = re.compile(r"\s(?:\||&&|;|>|<|#)|\)")


def _commands():
    """Each command's name -> its option strings."""
    [subparsers] = [a for a in _parser()._actions if a.dest == "command"]
    return {name: set(sub._option_string_actions) for name, sub in subparsers.choices.items()}


def _code_lines(path):
    """(line, text) of every code span and every line of a non-Python fenced block."""
    yield from code_spans(path)
    for block in blocks(path):
        if block.lang != "python":
            for offset, line in enumerate(block.code.splitlines(), start=1):
                yield block.line + offset, line


def _mentions():
    for path in doc_files():
        for number, text in _code_lines(path):
            for match in COMMAND.finditer(text):
                rest = SHELL_END.split(match.group(2))[0]
                options = {token.strip("[]") for token in rest.split()
                           if token.strip("[]").startswith("-")}
                yield f"{rel(path)}:{number}", match.group(1), options


def test_the_docs_name_some_commands():
    # the test below checks something: the pattern finds the docs' commands
    assert {command for _, command, _ in _mentions()} >= {"demo", "summary", "report", "watch"}


@pytest.mark.parametrize("where, command, options", list(_mentions()),
                         ids=lambda value: value if isinstance(value, str) else "")
def test_every_command_the_docs_name_exists_with_its_options(where, command, options):
    commands = _commands()
    assert command in commands, f"{where}: mindwatch {command} is no command " \
        f"(the commands: {', '.join(sorted(commands))})"
    assert options <= commands[command], f"{where}: mindwatch {command} has no option " \
        f"{', '.join(sorted(options - commands[command]))}"


def test_every_command_has_its_section_in_cli_md():
    text = (ROOT / "docs" / "cli.md").read_text(encoding="utf-8")
    missing = [name for name in _commands() if f"## `mindwatch {name}" not in text]
    assert not missing, f"commands docs/cli.md has no section for: {missing}"
