# shardline: `make demo` sets everything up and runs the main job; `make test` runs the tests.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
# The tested lock (constraints/lock.py writes it): exact versions for make demo / make test.
LOCK   := constraints/demo.txt
# Reinstall when pyproject.toml or the lock changes.
STAMP  := $(VENV)/.installed-$(shell cat pyproject.toml $(LOCK) | sha1sum | cut -c1-12)

export PREFECT_SERVER_ANALYTICS_ENABLED := false
export GX_ANALYTICS_ENABLED := false
export DO_NOT_TRACK := 1

.PHONY: setup demo test test-slow test-fast lint up down status bench browser-deps clean chaos wheels

setup: $(STAMP)

# torch is installed first and pinned in every step: the local CPU wheel, never a CUDA build.
$(STAMP): pyproject.toml $(LOCK)
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -c $(LOCK) -e '.[all,dev]' torch==2.13.0
	rm -f $(VENV)/.installed-*
	touch $@

demo: setup
	$(BIN)/shardline demo

test: setup browser-deps
	$(BIN)/python -m pytest -q -p no:cacheprovider --durations=40

# Debian's chromium + chromium-driver for the Prefect UI check (skipped where they are missing).
browser-deps:
	@if [ ! -x /usr/bin/chromium ] || [ ! -x /usr/bin/chromedriver ]; then \
	  if command -v apt-get >/dev/null && [ "$$(id -u)" = 0 ]; then \
	    echo "installing chromium + chromium-driver (apt)"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive \
	      apt-get install -y -qq chromium chromium-driver >/dev/null; \
	  else echo "chromium/chromium-driver missing and no root apt: browser tests will skip"; fi; \
	fi

# The fault and hostile-input suite in full (20 ingests through a fault-injecting S3 proxy,
# hostile drops, racing ingests); `make test` runs its quick subset. docs/reliability.md.
chaos: setup
	SHARDLINE_CHAOS_FULL=1 $(BIN)/python -m pytest -q -p no:cacheprovider -m chaos -s tests

# The wheel's core install (the notebook reader: no Spark, Prefect, GX or torch) with its
# dependencies from the index into a fresh venv of Python 3.11, 3.12 and 3.13 (pyenv); about
# a minute per Python. `make test` runs the quick variant (extras hidden, this venv's Python).
wheels: setup
	SHARDLINE_WHEELS_FULL=1 $(BIN)/python -m pytest -q -p no:cacheprovider -m slow tests/integration/test_packaging.py

# Tests marked slow (a benchmark's smoke runs, a second stack beside the first): they repeat
# what faster tests show and would push make test past CI's 30 minutes.
test-slow: setup browser-deps
	$(BIN)/python -m pytest -q -p no:cacheprovider -m slow tests

test-fast: setup
	$(BIN)/python -m pytest -q tests/unit

lint: setup
	$(BIN)/ruff check shardline tasks flows trainer infra bench tests
	$(BIN)/mypy

up: setup
	$(BIN)/shardline up

down:
	$(BIN)/shardline down

status:
	$(BIN)/shardline status

# Benchmark-only contenders (webdataset, Hugging Face datasets) come from the `bench` extra.
# Peers (bench/peers.py): --no-deps, as both declare torchvision, which drags a CUDA torch in;
# their runtime deps are in the extra. mosaicml-streaming imports torchvision itself: it runs
# only where a torchvision loads (a CUDA torch); elsewhere the report says why not.
bench: setup
	$(BIN)/pip install -q -e '.[all,dev,bench]' torch==2.13.0
	$(BIN)/pip install -q --no-deps litdata==0.2.76 mosaicml-streaming==0.13.0 torch==2.13.0
	$(BIN)/shardline bench all

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache
