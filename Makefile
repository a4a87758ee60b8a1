# The two commands of the README: `make demo` (the main job) and `make test`.
# Both bootstrap first: system packages, .venv, pinned dependencies (scripts/bootstrap.sh).
.PHONY: demo test lint bench bootstrap lock

bootstrap:
	@scripts/bootstrap.sh

demo: bootstrap
	.venv/bin/spade run --config configs/demo-cpu.yaml

# Python may write bytecode caches even where the shell says not to (this kind of machine sets
# PYTHONDONTWRITEBYTECODE=1): without them every pytest worker re-rewrites the asserts of ~250
# test modules at collection (~13 s of CPU each) and every subprocess recompiles spade/ and flows/
export PYTHONDONTWRITEBYTECODE :=

# mypy's cache outside the clone: a fresh clone on a machine that ran it before checks in
# seconds, not the ~2 min a cold cache takes (it compares contents, so it stays right)
MYPY_CACHE ?= $(HOME)/.cache/spade/mypy

lint: bootstrap
	.venv/bin/ruff check .
	.venv/bin/ruff format --check .
	.venv/bin/mypy --cache-dir "$(MYPY_CACHE)"
	.venv/bin/lint-imports

# one pytest worker more than cores: ~10% of a worker's time is spent waiting on a subprocess
# (a Prefect server starting, a jail, a CLI), time a third worker fills
TEST_WORKERS ?= $(shell echo $$(( $$(nproc) + 1 )))

test: lint
	.venv/bin/pytest -m "not slow and not gpu" -n $(TEST_WORKERS) -q --durations=25

bench: bootstrap
	.venv/bin/python bench/sandbox.py

# Re-pin every dependency after changing pyproject.toml.
lock: bootstrap
	.venv/bin/pip list --format=freeze --exclude-editable > constraints.txt
