# toposcope: the two commands are `make up` (run the stack here) and `make test`.
SHELL := /bin/bash
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: test up down status lint typecheck unit os-deps venv docs bench clean

$(STAMP): pyproject.toml
	./deploy/bootstrap.sh venv

venv: $(STAMP)

os-deps:
	./deploy/bootstrap.sh os-deps

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check toposcope exporters agent advisor dashboards sim slurm kube bench deploy tests

typecheck: $(STAMP)
	MYPY=$(VENV)/bin/mypy ./deploy/mypy-tree.sh

# the suite waits on daemons more than it computes: two workers, each test file on one of them
PYTEST_WORKERS ?= 2
unit: $(STAMP) os-deps
	TOPOSCOPE_CHECK_CLEAN_TREE=1 $(VENV)/bin/pytest -q -n $(PYTEST_WORKERS) --dist loadfile

test: $(STAMP) os-deps lint typecheck unit

# generated documentation: the metric reference and the README's screenshots (a browser run)
docs: $(STAMP) os-deps
	$(VENV)/bin/toposcope docs metrics --output docs/metrics.md
	TOPOSCOPE_DOCS_IMG=$(CURDIR)/docs/img $(VENV)/bin/pytest -q tests/dash/test_browser.py

# RM=slurm: a real local Slurm cluster schedules the simulated nodes (needs root)
# TLS=1: every toposcope daemon over https with certificates made under .run/pki
# (make has a built-in RM, "rm -f": only an RM the user set is passed on)
STACK_RM := $(if $(filter-out default,$(origin RM)),--rm $(RM))
up: $(STAMP) os-deps
	$(PY) deploy/stack.py up $(STACK_RM) $(if $(TLS),--tls)

down:
	@if [ -x $(PY) ]; then $(PY) deploy/stack.py down; else echo "nothing to stop"; fi

status: $(STAMP)
	$(PY) deploy/stack.py status

bench: $(STAMP) os-deps
	$(PY) bench/exporter_host.py

clean: down
	rm -rf .run
