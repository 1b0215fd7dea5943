"""The scale tests (marked scale): real jobs of 4 to 16 ranks, on one host and on two
(two_nodes.py), ~7 minutes on the 2-core CI host. ``make test-scale`` runs them (MindSpore's in
.venv, PyTorch's in .venv-torch); plain ``make test`` and ``make test-compat`` leave them out:
their jobs would share the cores with the suite's other tests (whose timing premises they
break, tests/waits_scheduling.py) and add minutes to each MindSpore pair. A marker
expression that names ``scale`` (``pytest -m scale tests/scale``) selects them."""
import pytest

# the shared checks' asserts say what differed, as a test module's do
pytest.register_assert_rewrite("job_checks")


def pytest_collection_modifyitems(config, items):
    if "scale" in (config.getoption("markexpr", "") or ""):
        return
    left_out = [item for item in items if item.get_closest_marker("scale") is not None]
    if left_out:
        config.hook.pytest_deselected(items=left_out)
        items[:] = [item for item in items if item.get_closest_marker("scale") is None]

