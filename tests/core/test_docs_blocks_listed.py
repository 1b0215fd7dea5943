"""Every Python block of README.md and docs/*.md is in docs_table.py (run, checked as a
signature, or skipped with a reason), so a new block that nobody runs fails here; every
entry names a block that exists; and code that is not tagged python is not Python."""
import ast
import re

from docs_exec import python_blocks
from docs_markdown import blocks, doc_files
from docs_table import BLOCKS, SUITES, Run, Signature, Skip

# Skipping is for what this machine cannot do (a device, several processes, a launcher, a
# network service); a skip more than these means the table grew one: look at it first.
MAX_SKIPS = 3


def test_every_python_block_is_listed_and_every_entry_is_a_block():
    shown = python_blocks()
    unlisted = [f"{block.where} ({key})" for key, block in shown.items() if key not in BLOCKS]
    assert not unlisted, "Python blocks that no test runs; add them to docs_table.py: " \
        + ", ".join(unlisted)
    stale = sorted(set(BLOCKS) - set(shown))
    assert not stale, f"docs_table.py names blocks the docs no longer have: {stale}"


def test_each_entry_says_where_it_runs_and_skips_are_few_and_said_why():
    for key, entry in BLOCKS.items():
        assert isinstance(entry, Run | Signature | Skip), key
        if isinstance(entry, Run | Signature):
            assert entry.suite in SUITES, key
        if isinstance(entry, Skip):
            assert len(entry.reason) > 40, f"{key}: say why it cannot run, and what tests it"
    assert sum(isinstance(entry, Skip) for entry in BLOCKS.values()) <= MAX_SKIPS


def test_a_signature_block_is_one_call_and_nothing_else():
    for key, entry in BLOCKS.items():
        if isinstance(entry, Signature):
            shown = re.fullmatch(r"[\w.]+\.(\w+)\(.*\)", python_blocks()[key].code.strip(), re.S)
            assert shown, f"{key}: not one call, monitor.method(parameters)"
            assert shown.group(1) == entry.target.rpartition(".")[2], key


def _is_python(code: str) -> bool:
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return False
    return any(isinstance(node, ast.Import | ast.ImportFrom | ast.FunctionDef | ast.Assign)
               for node in tree.body)


def test_untagged_and_text_blocks_hold_no_python():
    hidden = [block.where for path in doc_files() for block in blocks(path)
              if block.lang in ("", "text", "py") and _is_python(block.code)]
    assert not hidden, f"Python code not tagged ```python (so no test runs it): {hidden}"
