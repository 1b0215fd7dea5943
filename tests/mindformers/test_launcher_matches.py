"""The tests' launcher (mf_launcher.py) makes the calls run_mindformer.py makes, in its order,
for every supported release (recorded from MindFormers' repository in
tests/fixtures/run_mindformer/main_calls.json)."""
import ast
import json
from pathlib import Path

import pytest

HERE = Path(__file__).parent
RECORDED = json.loads((HERE.parent / "fixtures" / "run_mindformer" / "main_calls.json")
                      .read_text())["releases"]


def _calls(function: ast.FunctionDef) -> list[str]:
    found = []
    for node in ast.walk(function):
        if isinstance(node, ast.Call):
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
            found.append((node.lineno, node.col_offset, name))
    return [name for *_, name in sorted(found)]


def _launcher_main() -> list[str]:
    tree = ast.parse((HERE / "mf_launcher.py").read_text())
    [main] = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "main"]
    return _calls(main)


@pytest.mark.parametrize("release", sorted(RECORDED))
def test_the_launcher_makes_run_mindformers_calls_in_order(release):
    recorded = RECORDED[release]
    calls = iter(_launcher_main())
    # each recorded call, in order, among the launcher's (it builds a dataset between them)
    assert all(any(call == wanted for call in calls)
               for wanted in [recorded["config"], *recorded["main"]]), _launcher_main()


def test_the_launchers_environment_is_run_mindformers():
    recorded = {r["register_path_env"] for r in RECORDED.values()}
    assert recorded == {"REGISTER_PATH"}
    assert "REGISTER_PATH" in (HERE / "mf_config.py").read_text()
