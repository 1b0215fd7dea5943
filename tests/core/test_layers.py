"""The package's walls, read from the source: imports run one way, down the layers of
docs/design.md, and only the adapters import their framework."""
import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "src" / "mindwatch"
# Lowest first: a module may import from its own layer and the ones before it.
LAYERS = [
    {"basics"}, {"records", "job_schema"},
    {"anomaly", "policy", "observation", "version", "events"}, {"sinks"},
    {"settings"}, {"detectors", "hardware", "runlog"}, {"report"}, {"trackers"}, {"recovery"},
    {"framework"}, {"pipeline"}, {"decisions"}, {"ranks"}, {"job"}, {"background"},
    {"monitor", "__init__"}, {"mindspore", "torch"}, {"mindformers"}, {"cli"},
]
RANK = {part: rank for rank, parts in enumerate(LAYERS) for part in parts}


def _part(module: str) -> str:
    """``mindwatch.<part>[...]`` -> ``<part>`` (a folder, or a top-level module)."""
    parts = module.split(".")
    return "__init__" if len(parts) == 1 else parts[1]


def _imports(path: Path):
    """(line, module) of every import in ``path`` outside ``if TYPE_CHECKING:`` blocks, with
    relative imports resolved."""
    relative = path.relative_to(PACKAGE.parent).with_suffix("")
    package = list(relative.parts[:-1])
    tree = ast.parse(path.read_text())
    typing_only = {id(node) for block in ast.walk(tree) if isinstance(block, ast.If)
                   and getattr(block.test, "id", None) == "TYPE_CHECKING"
                   for node in ast.walk(block)}
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            if node.level == 0:
                base = node.module or ""
            else:
                up = package[: len(package) - (node.level - 1)]
                base = ".".join(up + ([node.module] if node.module else []))
            if base == "mindwatch":                     # from . import records
                for alias in node.names:
                    yield node.lineno, f"mindwatch.{alias.name}"
            else:
                yield node.lineno, base


MODULES = sorted(PACKAGE.rglob("*.py"))


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_imports_run_down_the_layers(path):
    own = _part(".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts))
    if path.parent == PACKAGE and path.name == "__init__.py":
        own = "__init__"
    assert own in RANK, f"{own} is in no layer: add it to LAYERS and docs/design.md"
    upward = [f"line {line}: {module} ({_part(module)})" for line, module in _imports(path)
              if module.startswith("mindwatch") and RANK[_part(module)] > RANK[own]]
    assert not upward, f"{path.name} ({own}) imports from a higher layer: {upward}"


# adapter folder -> the packages only it may import (mindformers/ builds on mindspore/)
FRAMEWORKS = {"mindspore": ("mindspore",), "mindformers": ("mindformers",),
              "torch": ("torch", "transformers", "accelerate", "lightning")}


@pytest.mark.parametrize("framework", sorted(FRAMEWORKS))
def test_only_the_adapter_imports_its_framework(framework):
    outside = [f"{path.relative_to(PACKAGE)}:{line}" for path in MODULES
               if path.relative_to(PACKAGE).parts[0] != framework
               and not (framework == "mindspore"
                        and path.relative_to(PACKAGE).parts[0] == "mindformers")
               for line, module in _imports(path)
               for package in FRAMEWORKS[framework]
               if module == package or module.startswith(package + ".")]
    assert not outside, f"{framework} imported outside mindwatch/{framework}/: {outside}"


def test_the_two_adapters_share_only_the_core():
    crossing = [f"{path.relative_to(PACKAGE)}:{line} {module}" for path in MODULES
                for own, other in (("torch", ("mindspore", "mindformers")),
                                   ("mindspore", ("torch",)), ("mindformers", ("torch",)))
                if path.relative_to(PACKAGE).parts[0] == own
                for line, module in _imports(path)
                if module.startswith("mindwatch.") and _part(module) in other]
    assert not crossing, f"one adapter imports the other: {crossing}"
