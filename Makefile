# `make test` and `make demo` do all the set-up themselves on a fresh machine.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# `make install`: the library with TensorFlow, the trainers and export, what the README's First hour
# runs. The test suite and the docs site add their extras on top, in their own stamp.
STAMP := $(VENV)/.installed
TEST_STAMP := $(VENV)/.installed-test
# pytest-xdist workers for `make test`: each takes whole test files, so that a file's shared set-up
# (a module-scoped fixture that trains both engines, say) runs once. Most of the suite's time is
# process start-up, compilation and single-threaded Python, so two workers on 2 cores take about
# 40% less time than one process; `make test TEST_WORKERS=auto` uses every core. A worker that dies
# ends the run at once, naming the test it was running: pytest-xdist 3.8 with --dist=loadfile can
# hang on the worker that replaces a dead one, or start the same fatal test again. Files are handed
# out in the order tests/conftest.py collects them (those with slow tests first), not pytest-xdist's
# (the most tests first), so that the workers end together.
TEST_WORKERS ?= 2
PYTEST := $(BIN)/python -m pytest -q --numprocesses=$(TEST_WORKERS) --dist=loadfile --no-loadscope-reorder --max-worker-restart=0

.PHONY: install test test-fast docs demo bench lint format clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(STAMP): setup.py | $(BIN)/python
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e ".[train,export]"
	touch $(STAMP)

$(TEST_STAMP): $(STAMP)
	$(BIN)/python -m pip install --quiet -e ".[test,plots,docs]"
	touch $(TEST_STAMP)

install: $(STAMP)

test: $(TEST_STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(MAKE) docs
	$(PYTEST) --durations=25

test-fast: $(TEST_STAMP)
	$(PYTEST) -m "not slow"

# The documentation site, from docs/ into site/; any warning (a broken link or anchor, an API name
# that does not resolve) fails the build. The stamp marks a strict build: tests/test_docs_site.py
# loads this build instead of building the site again.
docs: $(TEST_STAMP)
	NO_MKDOCS_2_WARNING=1 TF_CPP_MIN_LOG_LEVEL=3 $(BIN)/mkdocs build --strict
	touch site/.make-docs

demo: $(STAMP)
	$(BIN)/python -m trainers.demo --workdir=runs/demo

# The Performance tables: the four CPU benchmarks against the peers and the op profile, then the
# regions of docs/guides/benchmarks.md (benchmarks.accelerator needs a GPU: see that page).
bench: $(STAMP)
	$(BIN)/python -m pip install --quiet -e ".[bench]"
	$(BIN)/python -m benchmarks.inference
	$(BIN)/python -m benchmarks.train
	$(BIN)/python -m benchmarks.input_pipeline
	$(BIN)/python -m benchmarks.scaling
	$(BIN)/python -m benchmarks.op_profile
	$(BIN)/python -m benchmarks.report --write

lint: $(TEST_STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

format: $(TEST_STAMP)
	$(BIN)/ruff format .

clean:
	rm -rf runs site .pytest_cache
