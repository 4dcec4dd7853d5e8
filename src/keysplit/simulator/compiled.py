"""The fast path's kernels, compiled ahead of time when they have been built, else by numba's JIT.

A numba kernel costs every process about 0.45 s before its first call, even from numba's on-disk cache:
importing numba, initialising its CPU target and loading the cached code. On ``keysplit simulate`` over
5 M messages that is about as long as the routing itself. So ``make install`` also compiles the kernels once,
ahead of time, into an extension module (``python -m keysplit.simulator.compiled``, numba's ``pycc``) that imports in
under a millisecond without numba.

One source, two compilers: a kernel is an ordinary function decorated with :func:`kernel` and its numba
signature. The decorator returns the ahead-of-time build when that build exists and was compiled from the
current sources (:func:`sources_digest`); otherwise it returns ``numba.njit(cache=True, nogil=True)`` of the
function, which is what the build itself compiles. A missing, stale or unloadable build is never an error:
the JIT gives the same results, only later. ``KEYSPLIT_KERNELS=jit`` forces the JIT (the build does, and so
does the test that compares the two).
"""

from __future__ import annotations

import hashlib
import importlib
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

#: The extension module the build writes next to this file.
AOT_MODULE = "_kernels_aot"
#: Modules whose kernels are exported, in import order. Their files, this one and the modules whose
#: constants a kernel reads (compiled in as constants) make up :func:`sources_digest`.
KERNEL_MODULES = ("keysplit.simulator.hashing_batch", "keysplit.simulator.routing_kernel",
                  "keysplit.simulator.tokenize_kernel")
#: Paths below the ``keysplit`` package.
DIGEST_FILES = ("simulator/compiled.py", "simulator/hashing_batch.py", "simulator/routing_kernel.py", "hashing.py",
                "groupings/salt.py", "simulator/tokenize_kernel.py")
#: ``KEYSPLIT_KERNELS``: ``auto`` (the build when current) or ``jit`` (always numba's JIT).
ENV = "KEYSPLIT_KERNELS"

#: name -> (Python function, numba signature) of every exported kernel, filled by :func:`kernel`.
EXPORTS: dict[str, tuple[Callable[..., Any], str]] = {}


def sources_digest() -> int:
    """A digest of the kernels' sources and numpy's version (the build is linked against numpy's C API),
    as a non-negative int64: the build stores it, and a build whose digest differs is not used."""
    here = Path(__file__).parents[1]
    h = hashlib.sha256()
    for name in DIGEST_FILES:
        h.update((here / name).read_bytes())
    import numpy

    h.update(numpy.__version__.encode())
    return int.from_bytes(h.digest()[:8], "little") >> 1


def _load_build() -> Any | None:
    if os.environ.get(ENV, "auto") == "jit":
        return None
    try:
        module = importlib.import_module(f"keysplit.simulator.{AOT_MODULE}")
        return module if module.sources_digest() == sources_digest() else None
    except Exception:  # missing, stale or built for another platform: the JIT will do
        return None


_build: Any | None = _load_build()


def mode() -> str:
    """``aot`` when the kernels come from the ahead-of-time build, ``jit`` when numba compiles them."""
    return "aot" if _build is not None else "jit"


def kernel(signature: str | None = None, *, inline: bool = False) -> Callable[[Callable[..., Any]], Any]:
    """Decorate a kernel: ``signature`` (numba's, e.g. ``"void(i8[:])"``) exports it from the build; a helper
    without one is only ever called by other kernels (inlined into them when ``inline``)."""

    def wrap(fn: Callable[..., Any]) -> Any:
        if signature is not None:
            EXPORTS[fn.__name__] = (fn, signature)
        if _build is not None:
            # Helpers are compiled into the exported kernels; their Python definitions are never called.
            return getattr(_build, fn.__name__) if signature is not None else fn
        from numba import njit

        return njit(cache=True, nogil=True, inline="always" if inline else "never")(fn)

    return wrap


def build(output_dir: Path) -> Path:
    """Compile every exported kernel ahead of time into ``output_dir`` (must run with ``KEYSPLIT_KERNELS=jit``,
    so that the kernels' helpers are numba functions); returns the extension module's path."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # numba marks pycc as pending deprecation
        from numba.pycc import CC

    for name in KERNEL_MODULES:
        importlib.import_module(name)
    cc = CC(AOT_MODULE)
    cc.output_dir = str(output_dir)
    cc.verbose = False
    for name, (fn, signature) in EXPORTS.items():
        cc.export(name, signature)(fn)
    digest = sources_digest()

    def digest_of_build() -> int:
        return digest

    cc.export("sources_digest", "i8()")(digest_of_build)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cc.compile()
    return output_dir / cc.output_file


def main() -> int:
    """``python -m keysplit.simulator.compiled``: build the kernels next to this file (``make install`` runs it)."""
    if os.environ.get(ENV) != "jit":  # the build compiles the JIT's functions: rerun with it forced
        env = {**os.environ, ENV: "jit"}
        os.execve(sys.executable, [sys.executable, "-m", "keysplit.simulator.compiled"], env)
    from keysplit.simulator import (
        compiled,  # this file runs as __main__; the kernels register with the package's module
    )

    try:
        path = compiled.build(Path(__file__).parent)
    except Exception as e:  # no compiler or headers: the JIT still works
        print(f"keysplit: kernels not compiled ahead of time ({type(e).__name__}: {e}); numba's JIT will be "
              "used, which costs about 0.45 s per process", file=sys.stderr)
        return 0
    print(f"keysplit: kernels compiled ahead of time into {path.name}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
