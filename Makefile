# The two commands of the README are `make run` and `make test`; both set up what they need.
VENV ?= .venv
BIN := $(VENV)/bin
export NGB_VENV := $(VENV)

.PHONY: setup run test test-slow test-all check lint format types contracts wheel-test bench clean

setup:
	@bash scripts/setup.sh

run: setup  ## the TUI on the embedded default (localhost device, demo sweep)
	$(BIN)/ngb-tui

# Five processes (pytest-xdist), a test file's tests on one of them (--dist loadfile: its module
# fixtures -- built models, exported files -- are made once), the longest files first
# (tests/conftest.py's LONGEST_FILES_FIRST; --no-loadscope-reorder keeps that order instead of
# xdist's by-test-count one). Five on a 2-core machine because many tests wait on subprocesses,
# sshd and timers, and a fifth process fills those waits: warm runs in turn on the quiet 2-core VM
# (2026-11-30, 2,406 tests) took 285-295 s (median 288) with -n 5 against 294-297 s (median 296)
# with -n 4, at 3 % more CPU; -n 6 took 290 s. Earlier: -n 4 3:33-3:49 and -n 3 3:39 (2026-11-26,
# a smaller suite), -n 2 6:00 before the bytecode cache below. A trial started beside xdist's I/O
# thread takes its workers from a fork server (ngb.core.trial.worker_start), so no forked worker
# inherits a lock that thread holds. PYTEST_ARGS="-n 0" runs everything in one process;
# PYTEST_MORE adds options to these (PYTEST_MORE=--durations=40), where
# PYTEST_ARGS=--durations=40 would drop -n 5 (the suite then ran in one process, 18 min,
# 2026-11-29).
PYTEST_ARGS ?= -n 5 --dist loadfile --no-loadscope-reorder
PYTEST_MORE ?=
# Python's bytecode cache stays on for the tests even where the shell turns it off
# (PYTHONDONTWRITEBYTECODE=1): the tests start some hundred Python processes (agents, trials, CLIs)
# and each would compile ngb's sources again (make test 4:04-4:19 without the cache, 3:58 with it,
# 2026-11-26). It is also what a user's Python does, which is how the tests found ngb writing
# __pycache__ into the folder of a user's model file.
PYTEST := env -u PYTHONDONTWRITEBYTECODE $(BIN)/python -m pytest

test: setup  ## the CI subset: everything but tests marked slow
	$(PYTEST) -m "not slow" -q $(PYTEST_ARGS) $(PYTEST_MORE)

test-slow: setup  ## only the slow tier (full timm models, TVM tuning, long sweeps)
	$(PYTEST) -m slow -q $(PYTEST_ARGS) $(PYTEST_MORE)

test-all: setup  ## every test, slow ones included
	$(PYTEST) -q $(PYTEST_ARGS) $(PYTEST_MORE)

lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

format: setup
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

# mypy checks the package as installed (`packages = ["ngb"]` in pyproject.toml): `ngb/` links the
# four folders, so every cross-module import keeps its type.
types: setup
	$(BIN)/mypy

contracts: setup  ## import contracts ([tool.importlinter] in pyproject.toml): layers, agent bundle
	$(BIN)/lint-imports --no-cache

# What CI runs (.ci/run): the README's test command after the static checks, cheapest first.
check: lint types contracts test  ## format check, lint, types, import contracts, tests

wheel-test: setup  ## build the wheel, install it in a fresh venv, run the fast tests against it
	bash scripts/wheel_test.sh $(PYTEST_ARGS)

bench: setup
	$(BIN)/ngb bench all

clean:
	rm -rf build dist *.egg-info .pytest_cache .mypy_cache .ruff_cache
