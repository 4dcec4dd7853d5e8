"""The fast path's kernels compiled ahead of time (keysplit.simulator.compiled): built by the install, used only when
current, and routing exactly as numba's JIT does (the differential tests of tests/simulator/test_fast.py run on the
build; the JIT is checked here in a process that forces it)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from keysplit.simulator import compiled, fast, hashing_batch

ROOT = Path(__file__).resolve().parents[2]


def test_the_install_builds_the_kernels_and_this_process_uses_them():
    # `make test` depends on the build, so a failing build step shows up here rather than as a slow start.
    assert compiled.mode() == "aot", "no current ahead-of-time build: `make install` (re)builds it"
    for exported in (fast._route_chunk, hashing_batch._candidate_rows, hashing_batch._hash_all):
        assert not hasattr(exported, "py_func")  # a numba dispatcher has one; the build's functions do not


def test_a_build_from_other_sources_is_not_used(monkeypatch):
    assert compiled._load_build() is not None
    monkeypatch.setattr(compiled, "sources_digest", lambda: -1)
    assert compiled._load_build() is None


def test_keysplit_kernels_jit_forces_numbas_jit():
    env = {**os.environ, compiled.ENV: "jit"}
    code = "from keysplit.simulator import compiled, fast; print(compiled.mode(), type(fast._route_chunk).__name__)"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout
    assert out.split() == ["jit", "CPUDispatcher"]


def test_the_build_and_the_jit_route_every_fast_spec_identically():
    specs = ["kg", "sg", "pkg", "pkg:d=3,distinct=false", "pkg:load=global", "pkg:probe=0.001", "salt:k=3"]
    code = f"""
import json, sys
from keysplit.simulator import compiled
from keysplit.datasets import open_dataset
from keysplit.simulator.fast import fast_route, fast_simulate
ds = open_dataset("zipf:z=1.3,keys=3000,messages=40000,seed=5")
out = {{}}
for spec in {specs!r}:
    r = fast_simulate(ds, spec, 7, 3, split="key")
    out[spec] = [fast_route(ds, spec, 7, 3).tolist(), r.loads, r.dist_cost, r.series_imbalance]
print(json.dumps([compiled.mode(), out]))
"""
    runs = {}
    for kernels in ("auto", "jit"):
        env = {**os.environ, compiled.ENV: kernels}
        done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
        mode, runs[kernels] = json.loads(done.stdout)
        assert mode == ("aot" if kernels == "auto" else "jit")
    assert runs["auto"] == runs["jit"]


def test_the_makefile_rebuilds_when_any_digested_source_changes():
    makefile = (ROOT / "Makefile").read_text()
    listed = makefile.split("KERNEL_SOURCES := $(addprefix src/keysplit/,", 1)[1].split(")", 1)[0].split()
    assert sorted(listed) == sorted(compiled.DIGEST_FILES)
