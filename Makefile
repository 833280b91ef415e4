# Two commands do all the set-up on a fresh machine: `make demo` and `make test`.
# `make test-unit` is the fast subset: no JVM, no services, seconds.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
PIP    := $(BIN)/python -m pip

.PHONY: demo demo-writer test test-unit bench venv dev docs clean jvm-archive

# The venv's own pip (ensurepip's): any pip since 21.3 installs trib editable; an upgrade cost every fresh
# set-up a download and a second install of pip.
$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(VENV)/.installed: pyproject.toml | $(BIN)/python
	$(PIP) install -q -e .
	touch $@

$(VENV)/.installed-demo: pyproject.toml | $(BIN)/python
	$(PIP) install -q -e '.[demo]'
	touch $@ $(VENV)/.installed

$(VENV)/.installed-dev: pyproject.toml | $(BIN)/python
	$(PIP) install -q -e '.[dev]'
	touch $@ $(VENV)/.installed $(VENV)/.installed-demo $(VENV)/.installed-docs

$(VENV)/.installed-docs: pyproject.toml | $(BIN)/python
	$(PIP) install -q -e '.[docs]'
	touch $@ $(VENV)/.installed

venv: $(VENV)/.installed
dev: $(VENV)/.installed-dev

## make demo: install, then 24 hourly cycles of late logs: naive vs trib, distinct users three ways, lateness report
demo: $(VENV)/.installed-demo
	$(BIN)/trib demo --hours 24 --dir .trib/demo

## make demo-writer: the writer alone: ingest -> kill -9 -> resume -> verify on a local table
demo-writer: $(VENV)/.installed
	$(BIN)/python examples/demo.py --dir .trib/demo-writer

# The kerberos extra compiles against libkrb5: only where krb5-config says it is installed. Elsewhere (or
# if the build fails) the secured Hive tests skip, naming the missing module; make test goes on.
$(VENV)/.installed-kerberos: pyproject.toml | $(VENV)/.installed-dev
	@if command -v krb5-config >/dev/null 2>&1; then \
	  $(PIP) install -q -e '.[kerberos]' || echo "make: the kerberos extra did not build; the secured Hive tests will skip"; \
	else echo "make: no krb5-config (libkrb5-dev): skipping the kerberos extra; the secured Hive tests will skip"; fi
	touch $@

## make docs: the docs site (MkDocs + Material, mkdocs.yml) into site/; strict: a broken link or anchor, or a page
## left out of the nav, fails the build (make test builds it too: tests/test_docs_site.py). Preview: mkdocs serve
docs: $(VENV)/.installed-docs
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

## make test: install dev extras and run the whole suite (it starts its own services)
# Two pytest-xdist workers (CI has two cores): a module stays on one, the long modules first (tests/conftest.py).
# PYTEST_WORKERS=0 runs everything in one process.
PYTEST_WORKERS ?= 2
# Bytecode first: where PYTHONDONTWRITEBYTECODE is set (as on our CI machine) no process writes it, and each of the
# suite's hundreds of Python processes (trib runs, Spark's Python workers) compiled trib's sources again.
# The Spark JVMs' class-data archive (tests/jvm_archive.py) starts in the background before the kerberos build
# and the bytecode, not with the first test: made with the first tests, it came 2-4 minutes into the suite, and
# the JVMs started before it (the session's services, the Spark cluster's master and worker) ran without it.
test: $(VENV)/.installed-dev jvm-archive $(VENV)/.installed-kerberos
	$(BIN)/python -m compileall -q -j 0 tributary_read cli tests
	$(BIN)/python -m pytest -n $(PYTEST_WORKERS) --dist loadfile --no-loadscope-reorder $(PYTEST_ARGS)

jvm-archive: $(VENV)/.installed-dev
	@cd tests && ../$(BIN)/python -c "import jvm_archive; jvm_archive.jvm_options(make=True)"

## make test-unit: the tests marked unit (no JVM, no services, no long processes): seconds
test-unit: $(VENV)/.installed-dev
	$(BIN)/python -m pytest -m unit -q $(PYTEST_ARGS)

## make bench: the benchmarks behind the README figures
bench: $(VENV)/.installed-dev
	$(BIN)/python benchmarks/run_all.py

clean:
	rm -rf $(VENV) .airflow-venv .trib build site *.egg-info
