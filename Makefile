# Two commands on a fresh machine: `make demo` and `make test`. Both create .venv when it is
# missing, from the pins in requirements.lock (one place) and, for the MindFormers tests,
# requirements-mindformers.lock (installed without dependency resolution: see that file).
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: demo test lint venv bench docs clean

venv: $(STAMP)

$(STAMP): requirements.lock requirements-mindformers.lock pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -r requirements.lock
	$(PY) -m pip install --quiet --no-deps -r requirements-mindformers.lock
	$(PY) -m pip install --quiet --no-deps --no-build-isolation -e .
	touch $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/mindwatch demo

# Two pytest-xdist workers (this 2-core machine's best; tests/conftest.py keeps the msrun
# tests on one of them). PYTEST_WORKERS=0 runs every test in this process.
PYTEST_WORKERS ?= 2
test: $(STAMP)
	$(PY) -m pytest -n $(PYTEST_WORKERS) --dist loadgroup $(PYTEST_ARGS)

lint: $(STAMP)
	$(VENV)/bin/ruff check . && $(VENV)/bin/mypy

bench: $(STAMP)
	$(PY) benchmarks/overhead.py

# The settings table of docs/api.md, regenerated from src/mindwatch/settings.py.
docs: $(STAMP)
	$(PY) -m mindwatch.report.settings_table --write docs/api.md

clean:
	rm -rf $(VENV) runs .pytest_cache
