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

install: $(STAMP)

demo: $(STAMP)
	$(BIN)/keysplit demo

test: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/python -m pytest -q

bench: $(STAMP)
	$(BIN)/python benchmarks/routing.py

clean:
	rm -rf $(VENV) .keysplit build src/*.egg-info
