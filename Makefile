# `make run` and `make test` each set up .venv first; both work on a fresh machine.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
CFG ?= cfg/default.toml

.PHONY: setup run test test-slow lint bench clean

$(STAMP): setup.cfg pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	# torch first and pinned: the local CPU build; an unpinned torch pulls gigabytes of CUDA.
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e '.[test,bench,pettingzoo,unity,ray,robotics,mo,export,video,envpool,report,wandb,tune,minatar,atari]'
	touch $(STAMP)

setup: $(STAMP)

run: $(STAMP)
	$(VENV)/bin/wheeler2 run $(CFG)

# pytest-xdist, one worker per core; tests that start Ray share one worker (tests/conftest.py).
test: $(STAMP)
	$(PY) -m ruff check .
	$(PY) -m mypy
	$(PY) -m pytest -q -n auto --dist loadgroup

test-slow: $(STAMP)
	$(PY) -m pytest -q -m slow

# mypy reads its files and settings from pyproject.toml: wheeler2/ and tests/test_seams.py.
lint: $(STAMP)
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .
	$(PY) -m mypy

clean:
	rm -rf $(VENV) runs .pytest_cache .ruff_cache .mypy_cache
