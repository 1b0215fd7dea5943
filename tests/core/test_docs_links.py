"""Every relative link of README.md and docs/*.md leads somewhere: the file exists and its
``#anchor`` is one of that file's headings as GitHub makes them. Bare ``docs/<file>.md#anchor``
references (the settings table, mindwatch's own messages and docstrings) too."""
import re

import pytest

from docs_markdown import ROOT, anchors, doc_files, github_slug, links, rel

BARE = re.compile(r"(?<![\w/.-])(docs/[\w-]+\.md)#([\w-]+)")


def _broken(source, target):
    """Why ``target``, linked from ``source``, leads nowhere (None: it leads somewhere)."""
    path, _, anchor = target.partition("#")
    file = source if not path else (source.parent / path).resolve()
    if not file.exists():
        return f"no file {path}"
    if anchor and file.suffix == ".md" and anchor not in anchors(file):
        return f"no heading #{anchor} in {rel(file)}"
    return None


@pytest.mark.parametrize("doc", doc_files(), ids=rel)
def test_every_relative_link_and_anchor_resolves(doc):
    broken = [f"{rel(doc)}:{line}: {target}: {why}" for line, target in links(doc)
              if not re.match(r"[a-z]+:", target)           # http:, https:, mailto:
              for why in [_broken(doc, target)] if why]
    assert not broken, "\n".join(broken)


def test_bare_docs_references_in_the_docs_and_the_source_resolve():
    sources = [*doc_files(), *sorted((ROOT / "src" / "mindwatch").rglob("*.py"))]
    broken = [f"{rel(source)}: {path}#{anchor}"
              for source in sources
              for path, anchor in BARE.findall(source.read_text(encoding="utf-8"))
              if _broken(ROOT / "README.md", f"{path}#{anchor}")]
    assert not broken, "\n".join(broken)


@pytest.mark.parametrize("heading, slug", [
    ("`TrainMonitor(log_dir, **settings)`", "trainmonitorlog_dir-settings"),
    ("Run segments, `resume=True` and `state_dict`", "run-segments-resumetrue-and-state_dict"),
    ("`mindwatch.torch`: PyTorch", "mindwatchtorch-pytorch"),
    ("MindSpore's callbacks beside the monitor", "mindspores-callbacks-beside-the-monitor"),
    ("`\"skip\"`: withhold the update and go on", "skip-withhold-the-update-and-go-on"),
])
def test_anchors_are_githubs(heading, slug):
    assert github_slug(heading) == slug
