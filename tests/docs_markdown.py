"""Reading README.md and docs/*.md as the docs tests need them: fenced blocks (with the
heading they sit under), headings as GitHub anchors, relative links and code spans. Only
the standard library: the docs tests of both venvs use it."""
from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})\s*([^\s`]*)")
HEADING = re.compile(r"^ {0,3}(#{1,6})\s+(.*?)\s*#*\s*$")
# [text](target) and ![alt](target), the target without a title
LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
CODE_SPAN = re.compile(r"(`+)(.+?)\1", re.S)


def doc_files() -> list[Path]:
    """The user documentation: README.md and every docs/*.md."""
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def rel(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


@dataclass(frozen=True)
class Block:
    """A fenced block. ``key``: ``<file>#<anchor of the heading above>:<n>``, the n-th block
    of its language under that heading (1-based), which the docs tests' table is keyed by:
    it survives edits elsewhere in the file, unlike a line number."""
    path: Path
    line: int          # the opening fence's line, 1-based
    lang: str
    code: str
    key: str

    @property
    def where(self) -> str:
        return f"{rel(self.path)}:{self.line}"


def github_slug(heading: str) -> str:
    """The anchor GitHub gives a heading: lower case, punctuation (backticks, dots, colons,
    parentheses, ...) dropped, each space a hyphen; hyphens and underscores kept."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)      # a link's text only
    text = re.sub(r"[^\w\- ]", "", text.strip().lower())
    return text.replace(" ", "-")


def _lines(path: Path):
    """(line number, line, what it is) for every line of ``path``: ``"open"`` and ``"close"``
    for a fence, ``"code"`` inside one, ``"text"`` outside."""
    fence = None
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        match = FENCE.match(line)
        if fence is None:
            if match:
                fence = match.group(1)
            yield number, line, "open" if match else "text"
        elif line.strip().startswith(fence) and not line.strip().strip(fence[0]):
            fence = None
            yield number, line, "close"
        else:
            yield number, line, "code"


def anchors(path: Path) -> set[str]:
    """Every heading's anchor in ``path``; a repeated one gets -1, -2, ... as on GitHub."""
    seen: Counter[str] = Counter()
    found = set()
    for _, line, kind in _lines(path):
        match = HEADING.match(line) if kind == "text" else None
        if match:
            slug = github_slug(match.group(2))
            found.add(slug if not seen[slug] else f"{slug}-{seen[slug]}")
            seen[slug] += 1
    return found


def blocks(path: Path) -> list[Block]:
    """Every fenced block of ``path``, in order."""
    found, section, counts = [], "", Counter()
    fence_line, lang, body = 0, "", []
    for number, line, kind in _lines(path):
        if kind == "text":
            match = HEADING.match(line)
            section = github_slug(match.group(2)) if match else section
        elif kind == "open":
            fence_line, lang, body = number, FENCE.match(line).group(2).lower(), []
        elif kind == "code":
            body.append(line)
        else:
            counts[(section, lang)] += 1
            key = f"{rel(path)}#{section}:{counts[(section, lang)]}"
            found.append(Block(path, fence_line, lang, "\n".join(body) + "\n", key))
    return found


def prose(path: Path) -> list[tuple[int, str]]:
    """The paragraphs outside fenced blocks, each as (first line number, its lines): a code
    span or a link may run over a line break."""
    paragraphs, current, first = [], [], 0
    for number, line, kind in _lines(path):
        if kind != "text" or not line.strip():
            if current:
                paragraphs.append((first, "\n".join(current)))
            current = []
            continue
        if not current:
            first = number
        current.append(line.strip())
    if current:
        paragraphs.append((first, "\n".join(current)))
    return paragraphs


def code_spans(path: Path) -> list[tuple[int, str]]:
    """Every inline code span (tables included), with its line, a line break in it a space."""
    return [(number + text[:match.start()].count("\n"), " ".join(match.group(2).split()))
            for number, text in prose(path) for match in CODE_SPAN.finditer(text)]


def links(path: Path) -> list[tuple[int, str]]:
    """Every link target of ``path`` outside code (fenced blocks and code spans)."""
    found = []
    for number, text in prose(path):
        # code spans blanked, their line breaks kept: a link's line stays countable
        text = CODE_SPAN.sub(lambda m: re.sub(r"[^\n]", " ", m.group()), text)
        found += [(number + text[:m.start()].count("\n"), m.group(1))
                  for m in LINK.finditer(text)]
    return found
