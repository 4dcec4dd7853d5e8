# Two entry points (README): `make demo` and `make test`. Both create .venv when it is missing and
# (re)install only when pyproject.toml changed, so running them again is cheap.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test lint bench install clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade "pip>=23" "setuptools>=64,<82" wheel
	$(BIN)/python -m pip install -q -e ".[dev]"
	touch $(STAMP)

# Ahead of time: the fast path's kernels (keysplit/simulator/compiled.py; without them numba's JIT costs every process
# ~0.45 s) and the bytecode of every module (pip compiles a regular install; this one is editable).
KERNEL_SOURCES := $(addprefix src/keysplit/,simulator/compiled.py simulator/hashing_batch.py simulator/routing_kernel.py hashing.py groupings/salt.py)
BUILT := $(VENV)/.built

$(BUILT): $(STAMP) $(KERNEL_SOURCES)
	$(BIN)/python -m keysplit.simulator.compiled
	$(BIN)/python -m compileall -q src spark_replay topologies > /dev/null
	touch $(BUILT)

install: $(BUILT)

demo: $(BUILT)
	$(BIN)/keysplit demo

test: $(BUILT)
	$(BIN)/ruff check .
	$(BIN)/python -m pytest -q

bench: $(BUILT)
	$(BIN)/python benchmarks/routing_speed.py

clean:
	rm -rf $(VENV) .keysplit build src/*.egg-info src/keysplit/simulator/_kernels_aot*.so
