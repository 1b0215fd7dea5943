# Two commands on a fresh machine: `make demo` and `make test`. Both create .venv when it is
# missing, from the pins in requirements.lock (one place) and, for the MindFormers tests,
# requirements-mindformers.lock (installed without dependency resolution: see that file).
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: demo test test-compat test-torch test-trackers test-scale lint venv bench docs clean

venv: $(STAMP)

# uv installs the locks: a fresh .venv in ~20 s where pip took ~55 s (it unpacks, links and
# compiles the ~2.8 GB in parallel). Compiled at install, as pip does: where
# PYTHONDONTWRITEBYTECODE is set (this CI), every process would otherwise compile
# MindSpore's sources again (10 s of CPU where 4 s import it). The venv keeps pip for
# whoever uses it by hand.
UV_VERSION := 0.13.9
# $(call INSTALL,VENV_DIR): uv's pip install into that venv
INSTALL = $(1)/bin/uv pip install --quiet --compile-bytecode --python $(1)/bin/python

$(STAMP): requirements.lock requirements-mindformers.lock pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet uv==$(UV_VERSION)
	$(call INSTALL,$(VENV)) -r requirements.lock
	$(call INSTALL,$(VENV)) --no-deps -r requirements-mindformers.lock
	$(call INSTALL,$(VENV)) --no-deps --no-build-isolation -e .
	touch $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/mindwatch demo

# Three pytest-xdist workers: two take the tests that compute, the third only the tests that
# mostly wait and the msrun jobs, one after another (tests/waits_scheduling.py). With two
# workers that took any test, a worker's core sat idle while its test slept or its msrun
# job's ranks started and met: one run after the other on this 2-core host (as fast both
# times), 551 s with two, 470 s with three. A third worker that took any test ran three
# CPU-bound tests at once, and the paced tests' premises failed (3 runs of 4 had a
# failure). PYTEST_WORKERS=0 runs every test in this process.
PYTEST_WORKERS ?= 3
test: $(STAMP)
	$(PY) -m pytest -n $(PYTEST_WORKERS) --dist loadgroup $(PYTEST_ARGS)

# The other supported MindSpore / MindSpore Transformers pairs (docs/versions.md), each in
# its own venv from its own lock (compat/<pair>.lock), built once and rebuilt when the lock
# changes. Against each: the conformance matrix, the MindFormers Trainer/YAML tests, the
# multi-rank tests and SummaryCollector's; the tests marked default_pair (the Trainer column
# of the conformance matrix, the exit status and per-epoch step under MindFormers: mindwatch's
# own logic, ~10 launcher runs a pair) only in make test, to keep CI within its 90 minutes.
# COMPAT_PAIRS=ms2.8.0 runs one.
COMPAT_PAIRS ?= ms2.7.0-mf1.6.0 ms2.7.1-mf1.7.0 ms2.7.2-mf1.8.0 ms2.8.0 ms2.9.0-mf1.9.0
COMPAT_TESTS ?= -m "(conformance or mindformers or msrun or summary_collector) and not default_pair"
COMPAT := .venv-compat
# Two workers, as these pairs' runs were measured and have passed in CI with (make test's
# three, above, are for its own mix of tests): the second runs the msrun jobs, then the tests
# marked waits, never beside one (tests/waits_scheduling.py), then helps the first
COMPAT_WORKERS ?= 2

$(COMPAT)/%/.installed: compat/%.lock pyproject.toml
	rm -rf $(COMPAT)/$*
	$(PYTHON) -m venv $(COMPAT)/$*
	$(COMPAT)/$*/bin/python -m pip install --quiet uv==$(UV_VERSION)
	$(call INSTALL,$(COMPAT)/$*) -r compat/$*.lock
	$(call INSTALL,$(COMPAT)/$*) --no-deps --no-build-isolation -e .
	touch $@

test-compat: $(COMPAT_PAIRS:%=$(COMPAT)/%/.installed)
	@failed=""; for pair in $(COMPAT_PAIRS); do \
	  start=$$(date +%s); echo "== $$pair"; \
	  $(COMPAT)/$$pair/bin/python -m pytest -n $(COMPAT_WORKERS) --dist loadgroup \
	    -p no:cacheprovider $(COMPAT_TESTS) $(PYTEST_ARGS) || failed="$$failed $$pair"; \
	  echo "== $$pair: $$(( $$(date +%s) - start )) s"; \
	done; \
	if [ -n "$$failed" ]; then echo "test-compat failed for:$$failed"; exit 1; fi

# mindwatch.torch in its own venv (requirements-torch.lock: torch, transformers,
# lightning, no MindSpore), built once and rebuilt when the lock changes; its tests are
# tests/pytorch/ (marked torch). CI runs it beside make test-compat: the 8 minutes of
# make test are MindSpore's.
TORCH_VENV := .venv-torch
TORCH_WORKERS ?= 2
$(TORCH_VENV)/.installed: requirements-torch.lock pyproject.toml
	rm -rf $(TORCH_VENV)
	$(PYTHON) -m venv $(TORCH_VENV)
	$(TORCH_VENV)/bin/python -m pip install --quiet -r requirements-torch.lock
	$(TORCH_VENV)/bin/python -m pip install --quiet --no-deps --no-build-isolation -e .
	touch $@

test-torch: $(TORCH_VENV)/.installed
	$(TORCH_VENV)/bin/python -m pytest -n $(TORCH_WORKERS) -p no:cacheprovider tests/pytorch \
	  $(PYTEST_ARGS)

# The experiment trackers (report_to) in their own venv (requirements-trackers.lock: MindSpore
# as in .venv, MindSpore Transformers, MLflow with its server, SwanLab, W&B), built once and
# rebuilt when the lock changes. Their tests are tests/trackers/: each tracker for real (an
# MLflow server each module starts, SwanLab's local mode, W&B offline), under the monitor,
# Model.train and MindFormers' Trainer; then tests/trackers/pytorch_paths/ in .venv-torch (whose lock
# has the three trackers' client libraries), against a server run from .venv-trackers.
TRACKERS_VENV := .venv-trackers
$(TRACKERS_VENV)/.installed: requirements-trackers.lock requirements-mindformers.lock pyproject.toml
	rm -rf $(TRACKERS_VENV)
	$(PYTHON) -m venv $(TRACKERS_VENV)
	$(TRACKERS_VENV)/bin/python -m pip install --quiet uv==$(UV_VERSION)
	$(call INSTALL,$(TRACKERS_VENV)) -r requirements-trackers.lock
	$(call INSTALL,$(TRACKERS_VENV)) --no-deps -r requirements-mindformers.lock
	$(call INSTALL,$(TRACKERS_VENV)) --no-deps --no-build-isolation -e .
	touch $@

test-trackers: $(TRACKERS_VENV)/.installed $(TORCH_VENV)/.installed
	$(TRACKERS_VENV)/bin/python -m pytest -n 2 -p no:cacheprovider tests/trackers \
	  --ignore=tests/trackers/pytorch_paths $(PYTEST_ARGS)
	MINDWATCH_TRACKER_SERVER_PYTHON=$(TRACKERS_VENV)/bin/python $(TORCH_VENV)/bin/python -m \
	  pytest -n 2 -p no:cacheprovider tests/trackers/pytorch_paths $(PYTEST_ARGS)

# Real jobs past two ranks (tests/scale, marked scale; make test leaves them out): msrun with 8
# and with 16 ranks on this host, msrun with 8 and torchrun with 4 on two nodes (each node a
# network and UTS namespace of its own: tests/scale/two_nodes.py; needs root, as CI has), a
# NaN, a hang held by one rank, a slow rank in each. One job at a time, in one pytest process
# a venv: 16 ranks already share the 2 cores. ~7 minutes on the 2-core host; each job's time is its fixture's setup in the durations listed. Both
# venvs' tests run, whichever fails.
test-scale: $(STAMP) $(TORCH_VENV)/.installed
	@status=0; \
	$(PY) -m pytest -p no:cacheprovider -m scale --durations=0 --durations-min=5 \
	  tests/scale/test_msrun_*.py tests/scale/test_slow_ranks.py $(PYTEST_ARGS) || status=1; \
	$(TORCH_VENV)/bin/python -m pytest -p no:cacheprovider -m scale --durations=0 \
	  --durations-min=5 tests/scale/test_torchrun_*.py tests/scale/test_slow_ranks.py \
	  $(PYTEST_ARGS) || status=1; \
	exit $$status

lint: $(STAMP)
	$(VENV)/bin/ruff check . && $(VENV)/bin/mypy

bench: $(STAMP)
	$(PY) benchmarks/overhead.py

# The settings table of docs/api.md, regenerated from src/mindwatch/settings.py.
docs: $(STAMP)
	$(PY) -m mindwatch.report.settings_table --write docs/api.md

clean:
	rm -rf $(VENV) $(COMPAT) runs .pytest_cache
